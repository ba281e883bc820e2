"""How a trtllm-1.2 repository is started: one Triton server on one host, no MPI world.

The LLM-API engine models transfer KV over UCX with TensorRT-LLM's cache transceiver, which
needs no shared MPI world: each pool is its own Triton server on the host of its GPU type
(``--mode pools`` for the pool another server's router calls, e.g. decode on the L40S host;
the router, prefill and the ensembles in the repository of the H100 host). So a repository's
engine models must all be on one GPU type; a pool on another type gets an ``endpoint`` and
its own ``--mode pools`` repository.

GPU pinning: the host's container sees only the GPUs its engines use (``docker run --gpus
device=0,...``), and each engine instance owns ``tp * pp`` of them in order -- the
``gpu_device_ids`` parameter of its model (``;`` between instances, ``,`` within one; the engine
model sets ``CUDA_VISIBLE_DEVICES`` of instance k to its entry before it builds the LLM).

Cross-host KV transfer: ``UCX_TLS`` / ``UCX_NET_DEVICES`` from ``kv_transfer``, and the address
the transceiver advertises: TensorRT-LLM 1.2 (``cpp/tensorrt_llm/executor/cache_transmission/
ucx_utils/ucxCacheCommunicator.cpp``, ``getLocalIp``, read at NVIDIA/TensorRT-LLM commit
cb4c622cf5bb) takes the IPv4/IPv6 address of the interface named by ``TRTLLM_UCX_INTERFACE``;
unset (or without an address) it falls back to the source address of a route to 8.8.8.8, then
the hostname's address -- wrong on hosts whose default route is not the transfer network. So a
repository whose KV crosses hosts needs ``kv_transfer.interface`` (or ``interface_at_launch``),
``launch.sh`` passes it as ``TRTLLM_UCX_INTERFACE`` (``PDTRT_UCX_INTERFACE_<GPU>`` overrides it)
and checks in the container that it exists, is not loopback and has an address. An RDMA
transport (``rc``, ``ud``, ``dc``) gets ``/dev/infiniband`` and ``IPC_LOCK``. The transceiver's
ZMQ socket (the connection handshake) binds an ephemeral port of that address (``tcp://IP:*``,
same file): a firewall between the hosts must allow the ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default) on that interface.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pdtrt import envvars
from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import HostPlan, LaunchPlan, RankPlan, host_command
from pdtrt.blueprint.spec import RDMA_TRANSPORTS, DeploymentSpec
from pdtrt.blueprint.triton_models import param_number
from pdtrt.enums import Phase
from pdtrt.errors import RepoError, SpecIssue
from pdtrt.targets.trtllm_launch import (
    RDMA_DOCKER_FLAGS,
    TRITON_DEFAULT_PORTS,
    EnginePlacement,
    checked_env,
    crosses_hosts,
    host_suffix,
    interface_check,
    kv_interface,
    rank_command,
)

__all__ = ["SHARED_FRACTION_SUM", "plan_server_launch", "rdma_check", "server_script_values",
           "server_ucx_env", "sharing_issues"]


@dataclass(frozen=True, kw_only=True)
class _Devices:
    ranks: tuple[RankPlan, ...]
    num_gpus: int


def _devices(engines: list[EnginePlacement], *, share: bool = False) -> _Devices:
    """Each instance's GPU ordinals, in model order (the container's ordinals); ``share``:
    every instance on the same ones, from 0 (``serving.share_gpus``)."""
    ranks, next_device, most = [], 0, 0
    for eng in engines:
        per_instance = eng.tp * eng.pp
        most = max(most, per_instance)
        gids = []
        for _ in range(eng.instances):
            gids.append(tuple(range(next_device, next_device + per_instance)))
            next_device += 0 if share else per_instance
        ranks.append(RankPlan(model=eng.model, participant_ids=tuple(() for _ in gids),
                              gpu_device_ids=tuple(gids)))
    return _Devices(ranks=tuple(ranks), num_gpus=most if share else next_device)


# UCX transports Open MPI's UCX layer needs within a host: the LLM API's MPI workers read the
# same UCX_TLS as the KV transceiver (UCX documents self for loopback, sm for shared memory).
_MPI_TRANSPORTS = ("self", "sm")


def server_ucx_env(spec: DeploymentSpec, phases: Sequence[Phase], gpu: str
                   ) -> tuple[list[tuple[str, str]], tuple[tuple[str, str], ...]]:
    """``pdtrt.env`` of a trtllm-1.2 server whose engines serve ``phases`` on GPU type
    ``gpu``: the UCX variables, and why each has its value."""
    kv = spec.kv_transfer
    tls = list(kv.transports) + [t for t in _MPI_TRANSPORTS if t not in kv.transports]
    env = [(envvars.UCX_TLS, ",".join(tls)), (envvars.UCX_MEMTYPE_CACHE, "n")]
    reasons = [(envvars.UCX_TLS, "kv_transfer.transports, plus self and sm: the same variable "
                "governs Open MPI's UCX layer, which the LLM API's MPI workers use on this host"),
               (envvars.UCX_MEMTYPE_CACHE, "NVIDIA's documented setting for GPU buffers")]
    if "tcp" in kv.transports:
        env.append((envvars.UCX_MAX_RNDV_RAILS, "1"))
        reasons.append((envvars.UCX_MAX_RNDV_RAILS, "one NIC per transfer (UCX's default 2 "
                        "splits a TCP transfer across interfaces, docker0 included); NVIDIA's "
                        "documented setting"))
    devices = spec.host_net_devices(phases)
    if devices:
        own = [str(p) for p in phases if spec.pool(p).net_devices is not None]
        env.append((envvars.UCX_NET_DEVICES, ",".join(devices)))
        reasons.append((envvars.UCX_NET_DEVICES, (f"{own[0]}.net_devices" if own else
                                                  "kv_transfer.net_devices")
                        + f"; PDTRT_UCX_NET_DEVICES_{host_suffix(gpu)} replaces it at launch"))
    return env, tuple(reasons)


def rdma_check(spec: DeploymentSpec) -> str:
    """The shell lines ``launch.sh`` runs before ``docker run`` when the transports name an
    RDMA one: the host's ``/dev/infiniband`` goes into the container (with ``IPC_LOCK``) only
    where it exists. Without it, a list with ``tcp`` starts with a warning (UCX moves the KV
    over the rest); a list of RDMA transports only is refused -- the KV could not move."""
    if not spec.kv_transfer.uses_rdma:
        return "  RDMA=()"
    tls = ",".join(spec.kv_transfer.transports)
    fallback = [t for t in spec.kv_transfer.transports if t not in RDMA_TRANSPORTS]
    fix = ("install the host's RDMA stack (rdma-core or MLNX_OFED; see: ls /dev/infiniband, "
           "ibv_devices)")
    if "tcp" in fallback:
        missing = ('  echo "launch.sh: warning: kv_transfer.transports asks RDMA (UCX_TLS=' + tls
                   + ') but this host has no /dev/infiniband: starting without it, the KV moves '
                   f'over tcp; {fix}, or drop the RDMA transports from the spec" >&2')
    else:
        missing = ('  echo "launch.sh: kv_transfer.transports asks RDMA (UCX_TLS=' + tls
                   + ') but this host has no /dev/infiniband, and no tcp to fall back on: the '
                   f'KV could not cross hosts; {fix}, or add tcp to kv_transfer.transports and '
                   'regenerate the repository (pdtrt repo)" >&2; exit 2')
    lines = ["RDMA=()", "if [[ -e /dev/infiniband ]]; then",
             f"  RDMA=({' '.join(RDMA_DOCKER_FLAGS)})", "else", missing, "fi"]
    return "\n".join("  " + line for line in lines)


def gpu_check(dep: Deployment, plan: LaunchPlan) -> str:
    """The shell lines ``launch.sh`` runs before ``docker run``: the host has the GPUs its
    instances are pinned to (counted with ``nvidia-smi -L`` where it exists; docker's own
    error otherwise), else a refusal naming who needs which GPU and the ways out."""
    host = plan.hosts[0]
    if not host.num_gpus:
        return ""
    who = "; ".join(f"{r.model}: GPU {r.gpu_device_ids_param}" for r in plan.ranks)
    fixes = ["--mode disaggregated (no aggregated baseline)"] if "aggregated" in host.models \
        and len(host.models) > 1 else []
    fixes.append("fewer instances in the spec")
    fail = (f'echo "launch.sh: this repository needs {host.num_gpus} GPU(s) on this host '
            f'({who}), nvidia-smi lists $have; regenerate it with '
            f'{" or ".join(fixes)}, or run it on a host with {host.num_gpus}" >&2; exit 2')
    return "\n".join([
        "  if command -v nvidia-smi >/dev/null 2>&1; then",
        '    have="$(nvidia-smi -L | grep -c "^GPU " || true)"',
        f"    if (( have < {host.num_gpus} )); then {fail}; fi",
        "  fi"])


# What the engines sharing one GPU may give their KV caches in all: each takes its fraction of
# the memory free when it loads, so a sum below 1 leaves every later one room.
SHARED_FRACTION_SUM = 0.9


def sharing_issues(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    """``serving.share_gpus`` needs both pools on one GPU type (one host) and fractions of
    their own that leave each other room: TensorRT-LLM sizes each KV cache from the memory
    free when that engine loads, and Triton loads models in any order."""
    if not spec.serving.share_gpus:
        return
    if spec.prefill.gpu != spec.decode.gpu:
        yield SpecIssue(path="serving.share_gpus",
                        message=f"the pools are on {spec.prefill.gpu} and {spec.decode.gpu}, "
                        "two hosts: only engines of one host can share its GPUs")
    for phase in Phase:
        if "kv_cache_free_gpu_mem_fraction" not in spec.pool(phase).engine.model_fields_set:
            yield SpecIssue(path=f"{phase}.engine.kv_cache_free_gpu_mem_fraction",
                            message="serving.share_gpus: set this pool's fraction (e.g. 0.3) "
                            "so the engines sharing a GPU leave each other room")
    fractions = _shared_fractions(spec, [(str(p), p, spec.pool(p).instances) for p in Phase])
    total = sum(fractions.values())
    if total > SHARED_FRACTION_SUM:
        shown = " + ".join(f"{name}'s {param_number(v)}" for name, v in fractions.items())
        yield SpecIssue(path="decode.engine.kv_cache_free_gpu_mem_fraction",
                        message=f"serving.share_gpus: {shown} = {param_number(total)} of the "
                        f"free memory; at most {SHARED_FRACTION_SUM} leaves the engine that "
                        "loads last room")


def _shared_fractions(spec: DeploymentSpec, engines: Sequence[tuple[str, Phase, int]]
                      ) -> dict[str, float]:
    """What each engine model sharing the GPUs gives its KV caches: its pool's fraction
    times its instances (name, the pool whose engine settings it runs, instances)."""
    return {name: spec.pool(phase).engine.kv_cache_free_gpu_mem_fraction * instances
            for name, phase, instances in engines}


def _check_shared(spec: DeploymentSpec, engines: list[EnginePlacement]) -> None:
    """The spec's rule (:func:`sharing_issues`) for the engine models this repository
    really holds: the aggregated baseline takes the prefill's fraction once more (its options
    use the prefill pool's engine settings). Refuses a sum without room."""
    if not spec.serving.share_gpus:
        return
    fractions = _shared_fractions(spec, [(e.model, e.phase, e.instances) for e in engines])
    total = sum(fractions.values())
    if total > SHARED_FRACTION_SUM:
        shown = " + ".join(f"{m} {v:g}" for m, v in fractions.items())
        raise RepoError(
            f"serving.share_gpus: the engines of this repository would give their KV caches "
            f"{shown} = {total:g} of the free GPU memory, more than {SHARED_FRACTION_SUM}",
            hint="serve --mode disaggregated and --mode aggregated one after the other (as "
            "scripts/gpu_smoke.sh does), or lower the pools' kv_cache_free_gpu_mem_fraction")


def plan_server_launch(spec: DeploymentSpec, engines: list[EnginePlacement], *, image: str,
                       mounts: list[str]) -> LaunchPlan:
    """The one server of a repository holding ``engines`` (all of one GPU type).

    Raises :class:`RepoError` when they need two GPU types (two hosts)."""
    gpus = list(dict.fromkeys(e.gpu for e in engines))
    if len(gpus) > 1:
        placed = ", ".join(f"{e.model} on {e.gpu}" for e in engines)
        raise RepoError(
            f"a trtllm-1.2 repository is one Triton server on one host, but its engine models "
            f"need {len(gpus)} GPU types ({placed})",
            hint="give the pool on the other GPU type an endpoint (e.g. decode.endpoint: "
            "<its host>:8001), serve it with `pdtrt repo SPEC --mode pools` on that host, and "
            "this repository with --mode disaggregated or both")
    cross = crosses_hosts(spec)
    nic = kv_interface(spec, cross_host=cross)  # refuses a guessed cross-host address
    devices = _devices(engines, share=spec.serving.share_gpus)
    _check_shared(spec, engines)
    gpu = gpus[0] if gpus else ""
    host = HostPlan(gpu=gpu, host_var="",
                    interface_var=envvars.PDTRT_UCX_INTERFACE_PREFIX + host_suffix(gpu),
                    ranks=(0,), models=tuple(e.model for e in engines),
                    num_gpus=devices.num_gpus, launcher=True, server=True, interface=nic,
                    interface_required=cross)
    env, reasons = server_ucx_env(spec, list(dict.fromkeys(e.phase for e in engines)), gpu)
    return LaunchPlan(
        world_size=1, ranks=devices.ranks, env=checked_env(env), env_reasons=reasons,
        image=image,
        mounts=tuple(sorted(set(mounts))), worker_mounts=(), hosts=(host,), rank_hosts=(0,),
        rank_commands=(rank_command(spec, 0, []),), forwarded_env=(),
        launcher_env=(envvars.PDTRT_SRC,), worker_env=())


TRITONSERVER_IN_IMAGE = "/opt/tritonserver/bin/tritonserver"
"""NVIDIA's server in its image; elsewhere (a CPU machine) ``pdtrt serve`` runs its embedded one."""


def _serve_args(spec: DeploymentSpec) -> str:
    """``pdtrt serve``'s address and ports: the spec's, Triton's defaults where it has none."""
    s = spec.serving
    ports = {"grpc": s.grpc_port, "http": s.http_port, "metrics": s.metrics_port}
    return " ".join([f"--host {shlex.quote(s.host)}",
                     *(f"--{kind}-port {ports[kind] or TRITON_DEFAULT_PORTS[kind]}"
                       for kind in ("grpc", "http", "metrics"))])


def server_script_values(dep: Deployment, plan: LaunchPlan, *, target: str, image: str
                         ) -> dict[str, object]:
    """The values ``launch_server.sh.j2`` formats: every line prepared, the template only
    loops. ``image`` is the serving image's tag (built from the repository's Dockerfile)."""
    host = plan.hosts[0]
    devices = ",".join(str(i) for i in range(host.num_gpus))
    return {
        "name": dep.spec.name, "target": target, "base_image": plan.image, "image": image,
        "host": host.summary,
        "usage": [f"on the {host.gpu} host:  {host_command(plan, host)}",
                  "inside the container:  PYTHONPATH=/path/to/pdtrt-checkout ./launch.sh "
                  "--in-container"],
        "launcher_checks": [f': "${{{name}:?set {name} (see docs/repo.md)}}"'
                            for name in plan.launcher_env],
        "gpus": [f"--gpus {shlex.quote(chr(34) + 'device=' + devices + chr(34))}"]
        if devices else [],
        "interface": (f'-e {envvars.TRTLLM_UCX_INTERFACE}='
                      f'"${{{host.interface_var}:-{host.interface}}}"'),
        "interface_var": envvars.TRTLLM_UCX_INTERFACE,
        "interface_check": interface_check(required=host.interface_required,
                                           host_var=host.interface_var),
        "rdma_check": rdma_check(dep.spec),
        "gpu_check": gpu_check(dep, plan),
        "net_devices_var": (nd := envvars.PDTRT_UCX_NET_DEVICES_PREFIX + host_suffix(host.gpu)),
        "net_devices_line": (f'if [[ -n "${{{nd}:-}}" ]]; then export '
                             f'{envvars.UCX_NET_DEVICES}="${{{nd}}}"; fi'),
        "hub": _hub_access(dep, plan),
        "mounts": [shlex.quote(p) for p in plan.mounts],
        "serve_args": _serve_args(dep.spec),
        "tritonserver": TRITONSERVER_IN_IMAGE,
    }


# Where the container sees the launcher's Hugging Face cache (HF_HOME inside).
CONTAINER_HF_HOME = "/opt/hf-home"


def _hub_access(dep: Deployment, plan: LaunchPlan) -> list[str]:
    """``docker run`` lines for a model given by its Hub name (no ``model.path``, and no
    snapshot recorded by ``pdtrt build``, which the repository loads offline): the
    launcher's ``HF_TOKEN`` passed through when set (gated models such as Llama need it), and
    its Hugging Face cache (``HF_HOME``, else ``~/.cache/huggingface``) mounted read-write, so
    the LLM API and ``engine_limits`` (which reads the model's ``config.json`` from that cache)
    find what was downloaded before, and a download lands there."""
    if dep.spec.model.path is not None or (envvars.HF_HUB_OFFLINE, "1") in plan.env:
        return []
    return [f"-e {envvars.HF_TOKEN} -e {envvars.HF_HOME}={CONTAINER_HF_HOME}",
            f'-v "${{{envvars.HF_HOME}:-${{HOME:?set HOME or {envvars.HF_HOME}}}'
            f'/.cache/huggingface}}:{CONTAINER_HF_HOME}"']
