"""What each pod asks of its node: GPUs, CPU, host memory, shared memory.

- **GPUs**: ``nvidia.com/gpu`` = TP x PP of the pool (one instance per pod); requests equal
  limits, as the device plugin requires.
- **Host memory** (request = limit, so the pod is never the first one the kubelet evicts and an
  overrun is an OOM kill, not a node slowly swapping): a TensorRT-LLM engine passes through
  host memory while it loads, so a GPU pod asks for its engine's weights (pdtrt's estimate of
  weight bytes per GPU, times its GPUs) + :data:`GPU_POD_BASE_BYTES` for Triton, MPI, UCX and
  the Python models + its ``/dev/shm``. CPU pods (the front; reference pools) ask for a fixed
  :data:`CPU_POD_MEMORY_BYTES`.
- **/dev/shm** is a memory-backed emptyDir (a container's default is 64 MiB): Triton's Python
  backend moves every tensor through it and MPI/NCCL use it between a pod's ranks. It counts
  against the memory limit, hence it is added above.
- **CPU**: a request only -- no CPU limit, because CFS throttling of a latency-critical server
  turns into token latency; :data:`CPU_PER_GPU` cores per GPU (tokenization is on the front).
  The front's request grows with what its router relays: every output token of the deployment
  costs :data:`ROUTER_CPU_S_PER_TOKEN` of router CPU (``benchmarks/router_bench.md``, the
  fixed-rate capacity run), so it asks for the tokens/s of the decode pool at its autoscaler's
  maximum (pdtrt's estimate of one decode instance at its full batch, times the pods) times
  that, plus the same tokens times :data:`FRONT_CPU_S_PER_TOKEN` for the OpenAI front (as if
  every client came through it; one process, so one core at most), plus one core for Triton
  and the pre/postprocessing -- at least :data:`CPU_POD_CPUS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.blueprint.deployment import Deployment
from pdtrt.enums import Phase
from pdtrt.targets.registry import target_support

__all__ = ["FRONT_CPU_S_PER_TOKEN", "GPU_RESOURCE", "ROUTER_CPU_S_PER_TOKEN", "PodResources",
           "decode_tok_per_s", "front_resources", "front_tok_per_s", "pool_resources"]

GiB = 1 << 30
GPU_RESOURCE = "nvidia.com/gpu"
GPU_POD_BASE_BYTES = 8 * GiB
CPU_POD_MEMORY_BYTES = 4 * GiB
SHM_PER_GPU_BYTES = 2 * GiB
CPU_POD_SHM_BYTES = 1 * GiB
CPU_PER_GPU = 4
CPU_POD_CPUS = 2
# Router CPU per relayed token when it calls its phases over gRPC -- always, from the front pod
# (its pools are other pods), and the default in one server too: 211-232 µs measured with
# benchmarks/router_capacity.py --phase-transport grpc at c = 64 (2026-12-05 and -06; the upper
# end, as docs/serve.md "Sizing the router" uses it; over BLS it was 290-330 µs).
ROUTER_CPU_S_PER_TOKEN = 232e-6
# OpenAI front CPU per streamed token (SSE): 270-470 µs measured with benchmarks/front_bench.py
# at c = 32 and c = 1 (the upper end; benchmarks/front_bench.md). One front is one process.
FRONT_CPU_S_PER_TOKEN = 470e-6


def _gib(num_bytes: int) -> str:
    return f"{-(-num_bytes // GiB)}Gi"


@dataclass(frozen=True, kw_only=True)
class PodResources:
    gpus: int  # nvidia.com/gpu; 0 on CPU pods
    cpus: int  # request, cores
    memory_bytes: int  # request = limit, /dev/shm included
    shm_bytes: int  # size limit of the memory-backed /dev/shm
    extra: tuple[tuple[str, int], ...] = ()  # other device-plugin resources (RDMA), per pod
    why: str = ""  # the arithmetic, for the result and docs

    def to_k8s(self) -> dict[str, dict[str, str]]:
        """The container's ``resources``."""
        requests = {"cpu": str(self.cpus), "memory": _gib(self.memory_bytes)}
        limits = {"memory": _gib(self.memory_bytes)}
        devices = ([(GPU_RESOURCE, self.gpus)] if self.gpus else []) + list(self.extra)
        for name, count in devices:
            requests[name] = limits[name] = str(count)
        return {"requests": requests, "limits": limits}

    @property
    def shm_limit(self) -> str:
        return _gib(self.shm_bytes)


def decode_tok_per_s(dep: Deployment) -> float:
    """Output tokens/s one decode instance of ``dep`` sustains at its full batch (pdtrt's
    estimate at the spec's ISL / OSL with every decode slot busy)."""
    from pdtrt.perf.configs import serving_from_deployment
    from pdtrt.perf.estimate import Load, estimate
    from pdtrt.perf.factors import load_factors
    from pdtrt.perf.scheduling import running_capacity

    config = serving_from_deployment(dep)
    assert config.decode is not None
    w = dep.spec.workload
    slots = running_capacity(config.decode, w.isl, w.osl).seqs * config.decode_instances
    est = estimate(config, Load(isl=w.isl, osl=w.osl, concurrency=max(slots, 1)), load_factors())
    return est.output_tok_per_s / config.decode_instances


def front_tok_per_s(dep: Deployment, *, max_decode_replicas: int) -> float:
    """Output tokens/s the front relays when the decode pool runs ``max_decode_replicas``
    instances at their full batch."""
    return decode_tok_per_s(dep) * max_decode_replicas


def front_resources(dep: Deployment, *, tok_per_s: float,
                    max_decode_replicas: int) -> PodResources:
    """The front pod (Triton, the router, pre/postprocessing, the OpenAI front): CPU for the
    ``tok_per_s`` it relays when the decode pool runs ``max_decode_replicas`` instances
    (:func:`front_tok_per_s`; module docstring)."""
    if not target_support(dep.spec.target).needs_gpu:
        return PodResources(gpus=0, cpus=CPU_POD_CPUS, memory_bytes=CPU_POD_MEMORY_BYTES,
                            shm_bytes=CPU_POD_SHM_BYTES, why="CPU pod: fixed 4 GiB, 2 cores")
    router = tok_per_s * ROUTER_CPU_S_PER_TOKEN
    front = min(1.0, tok_per_s * FRONT_CPU_S_PER_TOKEN)  # one process: one core at most
    cpus = max(CPU_POD_CPUS, math.ceil(1 + router + front))
    why = (f"fixed 4 GiB; {cpus} cores: {max_decode_replicas} decode pods x "
           f"{tok_per_s / max_decode_replicas:.0f} tok/s (estimate at full batch) x "
           f"({ROUTER_CPU_S_PER_TOKEN * 1e6:.0f} us/token router = {router:.2f} cores + "
           f"{FRONT_CPU_S_PER_TOKEN * 1e6:.0f} us/token OpenAI front = {front:.2f} cores), + 1 "
           "for Triton and pre/postprocessing")
    return PodResources(gpus=0, cpus=cpus, memory_bytes=CPU_POD_MEMORY_BYTES,
                        shm_bytes=CPU_POD_SHM_BYTES, why=why)


def pool_resources(dep: Deployment, phase: Phase, *,
                   extra: tuple[tuple[str, int], ...] = ()) -> PodResources:
    """One pod = one instance of ``phase``'s pool (see the module docstring for the rules)."""
    pool = dep.spec.pool(phase)
    if not target_support(dep.spec.target).needs_gpu:
        return PodResources(gpus=0, cpus=CPU_POD_CPUS, memory_bytes=CPU_POD_MEMORY_BYTES,
                            shm_bytes=CPU_POD_SHM_BYTES, extra=extra,
                            why="CPU pod: fixed 4 GiB, 2 cores")
    gpus = pool.gpus_per_instance
    weights = dep.fits[phase].weight_bytes * gpus
    shm = SHM_PER_GPU_BYTES * gpus
    memory = weights + GPU_POD_BASE_BYTES + shm
    why = (f"{gpus} GPU(s): weights {weights / GiB:.2f} GiB + base "
           f"{GPU_POD_BASE_BYTES // GiB} GiB + /dev/shm {shm // GiB} GiB = {_gib(memory)}; "
           f"{CPU_PER_GPU * gpus} cores")
    return PodResources(gpus=gpus, cpus=CPU_PER_GPU * gpus, memory_bytes=memory, shm_bytes=shm,
                        extra=extra, why=why)
