"""Local GPUs through NVML (the ``pynvml`` module of ``nvidia-ml-py``), mapped to the catalog.

NVML is a seam: :func:`detect_gpus` takes any object with pynvml's functions, so tests feed it a
fake. On a machine without a driver it reports the reason instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pdtrt.facts.catalog import Catalog

__all__ = ["GPUDetection", "LocalGPU", "detect_gpus"]


@dataclass(frozen=True, kw_only=True)
class LocalGPU:
    index: int
    name: str
    memory_bytes: int
    compute_capability: str
    catalog_key: str | None  # None: a GPU the catalog does not know

    def to_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "name": self.name,
            "memory_bytes": self.memory_bytes,
            "compute_capability": self.compute_capability,
            "catalog_key": self.catalog_key,
        }


@dataclass(frozen=True, kw_only=True)
class GPUDetection:
    gpus: tuple[LocalGPU, ...]
    driver_version: str | None
    problem: str | None  # why NVML could not be used; None when it could

    def to_dict(self) -> dict[str, object]:
        return {
            "gpus": [g.to_dict() for g in self.gpus],
            "driver_version": self.driver_version,
            "problem": self.problem,
        }


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _load_pynvml() -> ModuleType | None:
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def detect_gpus(catalog: Catalog, nvml: Any = None) -> GPUDetection:
    """The GPUs NVML sees (``nvml`` defaults to the real ``pynvml``)."""
    nvml = nvml if nvml is not None else _load_pynvml()
    if nvml is None:
        return GPUDetection(gpus=(), driver_version=None,
                            problem="pynvml is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses named after the cause
        reason = _text(exc) or type(exc).__name__
        return GPUDetection(gpus=(), driver_version=None,
                            problem=f"no NVIDIA driver / GPU found ({reason})")
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            catalog_gpu = catalog.from_nvml_name(name)
            gpus.append(LocalGPU(
                index=index,
                name=name,
                memory_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
                compute_capability=f"{major}.{minor}",
                catalog_key=catalog_gpu.key if catalog_gpu else None,
            ))
        return GPUDetection(gpus=tuple(gpus), driver_version=driver, problem=None)
    finally:
        nvml.nvmlShutdown()
