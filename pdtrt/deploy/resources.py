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
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import Phase
from pdtrt.spec.deployment import Deployment
from pdtrt.targets.registry import target_support

__all__ = ["GPU_RESOURCE", "PodResources", "front_resources", "pool_resources"]

GiB = 1 << 30
GPU_RESOURCE = "nvidia.com/gpu"
GPU_POD_BASE_BYTES = 8 * GiB
CPU_POD_MEMORY_BYTES = 4 * GiB
SHM_PER_GPU_BYTES = 2 * GiB
CPU_POD_SHM_BYTES = 1 * GiB
CPU_PER_GPU = 4
CPU_POD_CPUS = 2


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


def front_resources() -> PodResources:
    return PodResources(gpus=0, cpus=CPU_POD_CPUS, memory_bytes=CPU_POD_MEMORY_BYTES,
                        shm_bytes=CPU_POD_SHM_BYTES, why="CPU pod: fixed 4 GiB, 2 cores")


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
