"""How a trtllm-0.21 repository is started: one MPI world, its hosts, ranks and environment.

NVIDIA's backend in orchestrator mode with ``TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0`` needs one
MPI world: rank 0 is the orchestrator (the ``tritonserver`` that serves every model), ranks
1.. are the engine ranks, ``tp * pp`` per instance, each running ``tritonserver`` with only the
engine models loaded (NVIDIA's ``launch_triton_server.py --multi-model --disable-spawn-processes``
does the same). ``participant_ids`` give each instance its ranks, ``gpu_device_ids`` their local
GPU ordinals (``;`` between instances, ``,`` within one).

Placement: pools on different GPU types sit on different hosts (an H100 host and an L40S host),
pools of one type on one host; GPU ordinals are counted per host. Rank 0 runs on the host of
the first engine model (prefill's: the clients' entry point), and the aggregated baseline on the
host its engine was built for (prefill's GPU type). ``launch.sh`` places every rank with
``mpirun --host <host>:<slots>`` per rank and forwards the environment (``-x``) to every rank --
ranks started over SSH on the other host see neither the container's nor ``pdtrt.env``'s
variables otherwise. Every rank loads every engine model, so every engine directory must exist
at the same path on every host (the backend checks it before it knows whether the rank serves
the model).

KV transfer is UCX, selected by ``TRTLLM_USE_UCX_KVCACHE=1`` (TensorRT-LLM 0.21 chooses the
transport by environment; its Triton backend sets no cache-transceiver config -- docs/repo.md).
The address the prefill side publishes in ``context_phase_params`` is a guess unless named:
without ``TRTLLM_UCX_INTERFACE``, ``getLocalIp`` (ucxCacheCommunicator.cpp) takes the first IPv4
interface that is not ``lo`` (at NVIDIA/TensorRT-LLM 0e366afd03af; not ``docker*`` either at
02734d9e, docs/repo.md) -- a management NIC as likely as the transfer network. So a
multi-host repository needs ``kv_transfer.interface`` (or ``interface_at_launch``, then
``launch.sh`` requires ``PDTRT_UCX_INTERFACE_<GPU>``), passed to every rank as
``TRTLLM_UCX_INTERFACE`` (``PDTRT_UCX_INTERFACE_<GPU>`` overrides it per host).
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pdtrt import envvars
from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import HostPlan, LaunchPlan, RankPlan, host_command
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.triton_models import EngineUse
from pdtrt.enums import Phase
from pdtrt.errors import RepoError

__all__ = ["RDMA_DOCKER_FLAGS", "EnginePlacement", "checked_env", "crosses_hosts",
           "engine_placements", "host_suffix", "interface_check", "kv_interface",
           "launch_mounts", "launch_script_values", "plan_launch", "rank_command",
           "transfer_buffer_size", "ucx_env"]

TRITON_DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_.,:/=+@-]*$")
# What the ranks started on another host over SSH need from the launching container besides
# pdtrt.env: the same image, so the same values.
_CONTAINER_ENV = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH")


@dataclass(frozen=True, kw_only=True)
class EnginePlacement:
    """One engine model of the repository and the GPUs its instances need."""

    model: str
    phase: Phase  # the pool it serves (the aggregated baseline: prefill's)
    gpu: str  # catalog key; one host per key, ordinals counted per key
    tp: int
    pp: int
    instances: int


def engine_placements(dep: Deployment, engines: Sequence[EngineUse]) -> list[EnginePlacement]:
    """Each engine model's GPU type and the GPUs its pool's instances need."""
    return [EnginePlacement(model=e.model, phase=e.phase, gpu=dep.gpus[e.phase].key,
                            tp=dep.spec.pool(e.phase).tp, pp=dep.spec.pool(e.phase).pp,
                            instances=dep.spec.pool(e.phase).instances) for e in engines]


def launch_mounts(dep: Deployment, layout: EngineLayout, tokenizer_dir: str) -> list[str]:
    """Host paths the serving container mounts at the same path: the engines (and options,
    checkpoints) and, when ``model.path`` is set, the HF checkpoint."""
    engines_dir = str(layout.deployment_dir)
    return [engines_dir] + ([tokenizer_dir] if dep.spec.model.path is not None else [])


def transfer_buffer_size(num_bytes: int) -> str:
    """``TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE`` in its largest exact unit (``512MB``)."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if num_bytes % size == 0:
            return f"{num_bytes // size}{unit}"
    return f"{num_bytes}B"


def ucx_env(spec: DeploymentSpec) -> list[tuple[str, str]]:
    """The UCX variables of a cross-host KV transfer: transports, NVIDIA's documented setting
    for GPU buffers, and the NICs when the spec pins them. One MPI world forwards one
    environment to every rank, so the pools' ``net_devices`` must agree (else
    :class:`RepoError`)."""
    kv = spec.kv_transfer
    env = [
        (envvars.UCX_TLS, ",".join(kv.transports)),
        (envvars.UCX_MEMTYPE_CACHE, "n"),  # NVIDIA's documented setting for GPU buffers
    ]
    prefill, decode = (spec.net_devices(p) for p in Phase)
    if prefill != decode:
        raise RepoError(
            f"prefill.net_devices {list(prefill)} and decode.net_devices {list(decode)} differ, "
            "but a trtllm-0.21 repository is one MPI world whose ranks all get one "
            "UCX_NET_DEVICES",
            hint="set kv_transfer.net_devices once (names both hosts have), or use target "
            "trtllm-1.2, whose pools launch per host")
    if prefill:
        env.append((envvars.UCX_NET_DEVICES, ",".join(prefill)))
    return env


RDMA_DOCKER_FLAGS = ("--device=/dev/infiniband", "--cap-add=IPC_LOCK")
"""What ``docker run`` adds for an RDMA transport (``kv_transfer.uses_rdma``; locked memory is
unlimited already)."""


def _is_loopback(url: str) -> bool:
    host = url.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: another host, as far as pdtrt can tell


def crosses_hosts(spec: DeploymentSpec) -> bool:
    """The KV moves between hosts: a pool has an endpoint on a host that is not this one (a
    loopback endpoint is another server on the same host)."""
    return any(not _is_loopback(url) for urls in spec.endpoints.values() for url in urls)


def kv_interface(spec: DeploymentSpec, *, cross_host: bool) -> str:
    """The NIC ``launch.sh`` names in ``TRTLLM_UCX_INTERFACE`` unless the host's
    ``PDTRT_UCX_INTERFACE_<GPU>`` says otherwise ("" for none).

    Raises :class:`RepoError` when the KV crosses hosts and the spec names no interface (nor
    defers it to launch): TensorRT-LLM would advertise a guess -- the source address of a route
    to 8.8.8.8, else the hostname's address (``getLocalIp``, ucxCacheCommunicator.cpp at
    NVIDIA/TensorRT-LLM cb4c622cf5bb97009451f7f44609498a48a2b11d), which on a host whose
    default route is not the transfer network, or whose hostname maps to 127.0.1.1, is an
    address the other host cannot reach."""
    kv = spec.kv_transfer
    if cross_host and kv.interface is None and not kv.interface_at_launch:
        raise RepoError(
            "kv_transfer.interface is not set, and the KV of this deployment crosses hosts: "
            "TensorRT-LLM would advertise a guessed address (the route to 8.8.8.8, or the "
            "hostname's, e.g. 127.0.1.1) that the other host may not reach",
            hint="set kv_transfer.interface to the NIC of the network the hosts reach each "
            "other on (`ip -br addr` on each host, e.g. eth1 or ib0), or set "
            "kv_transfer.interface_at_launch: true and give PDTRT_UCX_INTERFACE_<GPU> to "
            "launch.sh on each host")
    return kv.interface or ""


def interface_check(*, required: bool, host_var: str) -> str:
    """The shell lines ``launch.sh`` runs in the container before the server starts: the
    interface in ``TRTLLM_UCX_INTERFACE`` exists, is not loopback and has an address (without
    one TensorRT-LLM silently falls back to its guess); none given is an error when the KV
    crosses hosts, else TensorRT-LLM's own choice (an empty value would name no NIC)."""
    var = envvars.TRTLLM_UCX_INTERFACE
    fail = 'echo "launch.sh: %s" >&2; exit 2'
    missing = (fail % (f"set {host_var} (or kv_transfer.interface in the spec) to the NIC of "
                       "the network the hosts reach each other on: the KV crosses hosts, and "
                       "TensorRT-LLM would advertise a guessed address") if required
               else f"unset {var}")
    return "\n".join([
        f'if [[ -n "${{{var}:-}}" ]]; then',
        f'  nic="${var}"',
        '  [[ -d "/sys/class/net/$nic" ]] || { ' + fail % (
            f"{var}=$nic names no network interface of this host (see: ip -br addr)") + "; }",
        '  if (( $(cat "/sys/class/net/$nic/flags") & 0x8 )); then ' + fail % (
            f"{var}=$nic is a loopback interface: the other host cannot reach it") + "; fi",
        '  python3 - "$nic" <<\'PY\' || { ' + fail % (
            f"{var}=$nic has no IPv4 or global IPv6 address") + "; }",
        "import fcntl, socket, struct, sys",
        "nic = sys.argv[1]",
        "try:",
        "    s = socket.socket()",
        "    fcntl.ioctl(s.fileno(), 0x8915, struct.pack('256s', nic.encode()[:15]))",
        "except OSError:",
        "    v6 = [l.split() for l in open('/proc/net/if_inet6')]",
        "    sys.exit(not any(f[5] == nic and not f[0].startswith('fe80') for f in v6))",
        "PY",
        "else",
        f"  {missing}",
        "fi",
    ])


def checked_env(env: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``env`` as written to an env file; raises :class:`RepoError` for a value that is not."""
    for key, value in env:
        if not _SHELL_SAFE.match(value):
            raise RepoError(f"{key}={value!r} cannot be written to an env file",
                            hint="use plain UCX device and transport names")
    return tuple(env)


def _env(spec: DeploymentSpec) -> tuple[tuple[str, str], ...]:
    kv = spec.kv_transfer
    return checked_env([
        (envvars.TRTLLM_USE_UCX_KVCACHE, "1"),  # UCX KV transfer (TRT-LLM <= 0.21: by env)
        (envvars.TRTLLM_ORCHESTRATOR, "1"),
        (envvars.TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES, "0"),  # ranks come from mpirun
        (envvars.TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE,
         transfer_buffer_size(kv.buffer_size_bytes)),
        *ucx_env(spec),
    ])


def rank_command(spec: DeploymentSpec, rank: int, engine_models: list[str]) -> str:
    s = spec.serving
    ports = {"http": s.http_port, "grpc": s.grpc_port, "metrics": s.metrics_port}
    args = ['tritonserver', '--model-repository="$REPO"']
    for kind in ("grpc", "http", "metrics"):
        args += [f"--{kind}-port={ports[kind] or TRITON_DEFAULT_PORTS[kind]}",
                 f"--{kind}-address={s.host}"]
    if rank > 0:  # engine ranks load only the engine models
        args.append("--model-control-mode=explicit")
        args += [f"--load-model={m}" for m in engine_models]
    args += ["--disable-auto-complete-config",
             f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"]
    return " ".join(args)


def host_suffix(gpu: str) -> str:
    """``h100-sxm`` -> ``H100_SXM``: the per-host part of launch.sh's names."""
    return re.sub(r"[^A-Z0-9]", "_", gpu.upper())


def _hosts(engines: list[EnginePlacement], rank_gpus: list[str]) -> tuple[HostPlan, ...]:
    """One host per GPU type, in order of first use; rank 0 goes with the first engine."""
    gpus = list(dict.fromkeys(e.gpu for e in engines))
    hosts = []
    for i, gpu in enumerate(gpus):
        ranks = tuple(r for r, g in enumerate(rank_gpus) if g == gpu)
        models = tuple(e.model for e in engines if e.gpu == gpu)
        num_gpus = sum(e.tp * e.pp * e.instances for e in engines if e.gpu == gpu)
        # one host: mpirun starts every rank locally, no address needed
        host_var = envvars.PDTRT_HOST_PREFIX + host_suffix(gpu) if len(gpus) > 1 else ""
        interface_var = envvars.PDTRT_UCX_INTERFACE_PREFIX + host_suffix(gpu)
        hosts.append(HostPlan(gpu=gpu, host_var=host_var, interface_var=interface_var,
                              ranks=ranks, models=models, num_gpus=num_gpus, launcher=i == 0))
    return tuple(hosts)


def plan_launch(spec: DeploymentSpec, engines: list[EnginePlacement], *, image: str,
                mounts: list[str], worker_mounts: list[str] | None = None) -> LaunchPlan:
    """Ranks, device ids, hosts, environment and per-rank commands for ``engines`` (in order)."""
    next_rank = 1
    next_device: dict[str, int] = {}
    ranks = []
    rank_gpus = [engines[0].gpu if engines else ""]  # rank 0: the first engine's host
    for eng in engines:
        per_instance = eng.tp * eng.pp
        pids, gids = [], []
        for _ in range(eng.instances):
            pids.append(tuple(range(next_rank, next_rank + per_instance)))
            first = next_device.get(eng.gpu, 0)
            gids.append(tuple(range(first, first + per_instance)))
            next_rank += per_instance
            next_device[eng.gpu] = first + per_instance
            rank_gpus += [eng.gpu] * per_instance
        ranks.append(RankPlan(model=eng.model, participant_ids=tuple(pids),
                              gpu_device_ids=tuple(gids)))
    hosts = _hosts(engines, rank_gpus)
    index = {h.gpu: i for i, h in enumerate(hosts)}
    names = [e.model for e in engines]
    env = _env(spec)
    multi = len(hosts) > 1
    nic = kv_interface(spec, cross_host=multi)  # refuses a guessed cross-host address
    hosts = tuple(replace(h, interface=nic, interface_required=multi)
                  for h in hosts)
    host_vars = tuple(h.host_var for h in hosts) if multi else ()
    ssh = (envvars.PDTRT_SSH_DIR,) if multi else ()
    return LaunchPlan(
        world_size=next_rank, ranks=tuple(ranks), env=env, image=image,
        mounts=tuple(sorted(set(mounts))),
        worker_mounts=tuple(sorted(set(mounts if worker_mounts is None else worker_mounts))),
        hosts=hosts,
        rank_hosts=tuple(index.get(g, 0) for g in rank_gpus),
        rank_commands=tuple(rank_command(spec, r, names) for r in range(next_rank)),
        forwarded_env=tuple(k for k, _ in env) + _CONTAINER_ENV,
        launcher_env=(envvars.PDTRT_SRC, *ssh, *host_vars), worker_env=ssh)


def _array(host: HostPlan) -> str:
    """The bash array of ``host``'s mpirun options in launch.sh (``L40S``)."""
    return host_suffix(host.gpu)


def _usage(plan: LaunchPlan) -> list[str]:
    if not plan.multi_host:
        return [f"on the host:           {host_command(plan, plan.hosts[0])}",
                "inside the container:  PYTHONPATH=/path/to/pdtrt-checkout ./launch.sh "
                "--in-container"]
    return [f"{n}. on the {h.gpu} host:  {host_command(plan, h)}"
            for n, h in enumerate(plan.start_order, 1)]


def launch_script_values(dep: Deployment, plan: LaunchPlan, *, target: str
                         ) -> dict[str, object]:
    """The values ``launch.sh.j2`` formats: every line prepared, the template only loops."""
    multi = [True] if plan.multi_host else []
    last = plan.world_size - 1
    slots = {h.gpu: len(h.ranks) for h in plan.hosts}
    checks = [f': "${{{name}:?set {name} (see docs/repo.md)}}"'
              for name in plan.launcher_env]
    checks += [f': "${{{h.interface_var}:?set {h.interface_var} to the NIC the hosts reach '
               f'each other on (kv_transfer.interface_at_launch)}}"'
               for h in plan.hosts if h.interface_required and not h.interface]
    passed = [f'-e {name}="${{{name}:-}}"' for name in (
        *(h.host_var for h in plan.hosts), *(h.interface_var for h in plan.hosts),
        envvars.PDTRT_SSH_PORT)] if plan.multi_host else []
    arrays = []
    for h in plan.hosts:
        place = f'--host "${{{h.host_var}}}:{slots[h.gpu]}" ' if plan.multi_host else ""
        nic = f'"${{{h.interface_var}:-{h.interface}}}"'
        arrays.append((_array(h), f'{place}"${{FORWARD[@]}}" '
                       f'-x {envvars.TRTLLM_UCX_INTERFACE}={nic}'))
    return {
        "name": dep.spec.name, "target": target, "image": plan.image,
        "world_size": plan.world_size, "last_rank": last,
        "hosts": [h.summary for h in plan.hosts], "usage": _usage(plan),
        "launcher_checks": checks, "passed_env": passed, "multi_host": multi,
        "mounts": [shlex.quote(p) for p in plan.mounts],
        "worker_mounts": [shlex.quote(p) for p in plan.worker_mounts],
        "forward": " ".join(f"-x {name}" for name in plan.forwarded_env),
        "host_arrays": arrays,
        "rank_commands": [(f'"${{{_array(plan.hosts[plan.rank_hosts[r]])}[@]}}"', c,
                           "" if r == last else " : \\")
                          for r, c in enumerate(plan.rank_commands)],
    }
