"""How a trtllm-0.21 repository is started: one MPI world, its ranks, its environment.

NVIDIA's backend in orchestrator mode with ``TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES=0`` needs one
MPI world: rank 0 is the orchestrator (the ``tritonserver`` that serves every model), ranks
1.. are the engine ranks, ``tp * pp`` per instance, each running ``tritonserver`` with only the
engine models loaded (NVIDIA's ``launch_triton_server.py --multi-model --disable-spawn-processes``
does the same). ``participant_ids`` give each instance its ranks, ``gpu_device_ids`` their local
GPU ordinals (``;`` between instances, ``,`` within one).

GPU ordinals are counted per GPU type: pools on different GPU types are assumed to sit on
different hosts (an H100 node and an L40S node), pools of one type on one host. KV transfer is
UCX, selected by ``TRTLLM_USE_UCX_KVCACHE=1`` (TensorRT-LLM <= 0.21).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pdtrt import envvars
from pdtrt.errors import RepoError
from pdtrt.spec.schema import DeploymentSpec
from pdtrt.targets.launch import LaunchPlan, RankPlan

__all__ = ["EnginePlacement", "plan_launch", "transfer_buffer_size"]

TRITON_DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_.,:/=+@-]*$")


@dataclass(frozen=True, kw_only=True)
class EnginePlacement:
    """One engine model of the repository and the GPUs its instances need."""

    model: str
    gpu: str  # catalog key; ordinals are counted per key
    tp: int
    pp: int
    instances: int


def transfer_buffer_size(num_bytes: int) -> str:
    """``TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE`` in its largest exact unit (``512MB``)."""
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if num_bytes % size == 0:
            return f"{num_bytes // size}{unit}"
    return f"{num_bytes}B"


def _env(spec: DeploymentSpec) -> tuple[tuple[str, str], ...]:
    kv = spec.kv_transfer
    env = [
        (envvars.TRTLLM_USE_UCX_KVCACHE, "1"),  # UCX KV transfer (TRT-LLM <= 0.21: by env)
        (envvars.TRTLLM_ORCHESTRATOR, "1"),
        (envvars.TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES, "0"),  # ranks come from mpirun
        (envvars.TRTLLM_KVCACHE_TRANSFER_BUFFER_SIZE,
         transfer_buffer_size(kv.buffer_size_bytes)),
        (envvars.UCX_TLS, ",".join(kv.transports)),
        (envvars.UCX_MEMTYPE_CACHE, "n"),  # NVIDIA's documented setting for GPU buffers
    ]
    if kv.net_devices:
        env.append((envvars.UCX_NET_DEVICES, ",".join(kv.net_devices)))
    for key, value in env:
        if not _SHELL_SAFE.match(value):
            raise RepoError(f"{key}={value!r} cannot be written to an env file",
                            hint="use plain UCX device and transport names")
    return tuple(env)


def _rank_command(spec: DeploymentSpec, rank: int, engine_models: list[str]) -> str:
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


def plan_launch(spec: DeploymentSpec, engines: list[EnginePlacement], *, image: str,
                mounts: list[str]) -> LaunchPlan:
    """Ranks, device ids, environment and per-rank commands for ``engines`` (in that order)."""
    next_rank = 1
    next_device: dict[str, int] = {}
    ranks = []
    for eng in engines:
        per_instance = eng.tp * eng.pp
        pids, gids = [], []
        for _ in range(eng.instances):
            pids.append(tuple(range(next_rank, next_rank + per_instance)))
            first = next_device.get(eng.gpu, 0)
            gids.append(tuple(range(first, first + per_instance)))
            next_rank += per_instance
            next_device[eng.gpu] = first + per_instance
        ranks.append(RankPlan(model=eng.model, participant_ids=tuple(pids),
                              gpu_device_ids=tuple(gids)))
    world_size = next_rank
    names = [e.model for e in engines]
    return LaunchPlan(
        world_size=world_size, ranks=tuple(ranks), env=_env(spec), image=image,
        mounts=tuple(sorted(set(mounts))),
        rank_commands=tuple(_rank_command(spec, r, names) for r in range(world_size)),
    )
