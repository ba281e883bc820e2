"""``pdtrt doctor``: what this machine can do -- GPUs, the embedded Triton, UCX, TensorRT-LLM.

Every check is reported, none raises: a machine without a GPU or without TensorRT-LLM is a
normal answer ("not available: why"), not an error. Components are located without importing
them (``import ucxx`` alone rewrites UCX environment variables).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pdtrt.facts.catalog import Catalog
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.facts.gpu_detect import GPUDetection, detect_gpus

__all__ = ["Check", "CheckStatus", "DoctorReport", "dist_version", "llm_api_check",
           "numpy_check", "python_check", "run_doctor"]


class CheckStatus(StrEnum):
    OK = "ok"
    MISSING = "missing"
    PROBLEM = "problem"


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    needed_for: str

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": str(self.status), "detail": self.detail,
                "needed_for": self.needed_for}


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    checks: tuple[Check, ...]
    gpus: GPUDetection

    def to_dict(self) -> dict[str, object]:
        return {"checks": [c.to_dict() for c in self.checks], "gpus": self.gpus.to_dict()}


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def python_check() -> Check:
    v = sys.version_info
    ok = v >= (3, 11)
    return Check(name="python", status=CheckStatus.OK if ok else CheckStatus.PROBLEM,
                 detail=f"{v.major}.{v.minor}.{v.micro} ({sys.executable})",
                 needed_for="everything (pdtrt needs Python >= 3.11)")


def numpy_check() -> Check:
    version = dist_version("numpy")
    if version is None:
        return Check(name="numpy", status=CheckStatus.MISSING, detail="not installed",
                     needed_for="the reference engine inside Triton")
    major = int(version.split(".")[0])
    if major >= 2:
        return Check(name="numpy", status=CheckStatus.PROBLEM,
                     detail=f"{version}: numpy 2 makes the Triton 2.51 Python-backend stub send "
                     "empty tensors; install numpy<2",
                     needed_for="the reference engine inside Triton")
    return Check(name="numpy", status=CheckStatus.OK, detail=version,
                 needed_for="the reference engine inside Triton")


def _triton_check() -> Check:
    needed = "pdtrt serve with the embedded server (target reference)"
    embedded = find_embedded_triton()
    if embedded is None:
        return Check(name="embedded Triton", status=CheckStatus.MISSING,
                     detail="nvidia-pytriton is not installed (pip install 'pdtrt[server]')",
                     needed_for=needed)
    missing = embedded.missing_parts()
    if missing:
        return Check(name="embedded Triton", status=CheckStatus.PROBLEM,
                     detail="nvidia-pytriton is installed but lacks: " + "; ".join(missing),
                     needed_for=needed)
    return Check(name="embedded Triton", status=CheckStatus.OK,
                 detail=f"Triton from nvidia-pytriton {dist_version('nvidia-pytriton')} at "
                 f"{embedded.tritonserver}", needed_for=needed)


def _ucxx_check() -> Check:
    needed = "KV transfer of the reference engine"
    version = dist_version("ucxx-cu12")
    if version is None or importlib.util.find_spec("ucxx") is None:
        return Check(name="ucxx", status=CheckStatus.MISSING,
                     detail="not installed (pip install 'pdtrt[reference]')", needed_for=needed)
    return Check(name="ucxx", status=CheckStatus.OK, detail=f"ucxx-cu12 {version}",
                 needed_for=needed)


def _trtllm_check() -> Check:
    needed = ("GPU build steps of trtllm-* targets, inside their NGC container (trtllm-1.2, "
              "the default: 26.07, ModelOpt FP8 only; trtllm-0.21: 25.08, engines)")
    version = dist_version("tensorrt_llm") or dist_version("tensorrt-llm")
    build = shutil.which("trtllm-build")
    if version is None and build is None:
        return Check(name="TensorRT-LLM", status=CheckStatus.MISSING,
                     detail="not installed here; GPU build steps run inside the NGC container "
                     "on the target GPU (`pdtrt build --dry-run` prints them; trtllm-1.2's "
                     "options files need no GPU)",
                     needed_for=needed)
    return Check(name="TensorRT-LLM", status=CheckStatus.OK,
                 detail=f"tensorrt_llm {version or 'unknown version'}; trtllm-build at "
                 f"{build or 'not on PATH'}", needed_for=needed)


def llm_api_check(load: Callable[[], Any] | None = None, *,
                  require_tensorrt_llm: bool = False) -> Check:
    """The engine model's load-time check (:mod:`pdtrt.llmapi.check`) on the LLM API this
    machine's stubs would run: ``tensorrt_llm`` where it imports, else pdtrt's CPU twin --
    or, with ``require_tensorrt_llm`` (a trtllm-1.2 repository), ``tensorrt_llm`` only."""
    from pdtrt.errors import LLMApiMismatchError
    from pdtrt.llmapi import LLMApiImpl, load_llm_api
    from pdtrt.llmapi.check import PINNED_VERSION, check_llm_api

    needed = "the LLM-API engine models (trtllm-1.2 on a GPU; the reference twin on the CPU)"
    impl = LLMApiImpl.TENSORRT_LLM if require_tensorrt_llm else LLMApiImpl.AUTO
    try:
        api = load() if load is not None else load_llm_api(impl)
    except Exception as exc:  # a broken install is an answer, not a crash
        return Check(name="LLM API", status=CheckStatus.PROBLEM,
                     detail=f"tensorrt_llm does not import: {exc}", needed_for=needed)
    try:
        surface = check_llm_api(api)
    except LLMApiMismatchError as exc:
        return Check(name="LLM API", status=CheckStatus.PROBLEM,
                     detail=f"{exc.message} ({exc.hint})", needed_for=needed)
    what = "pdtrt's CPU twin of TensorRT-LLM" if api.is_reference else "tensorrt_llm"
    notes = "; ".join(surface.notes()) or f"the pinned release {PINNED_VERSION}"
    return Check(name="LLM API", status=CheckStatus.OK,
                 detail=f"{what} {surface.version}: every field the engine model needs is "
                 f"there ({notes})", needed_for=needed)


def run_doctor(catalog: Catalog, *, nvml: Any = None,
               load_llm_api: Callable[[], Any] | None = None) -> DoctorReport:
    """Run every check (``nvml`` is the NVML seam, see :func:`detect_gpus`;
    ``load_llm_api`` the LLM API's, see :func:`pdtrt.llmapi.load_llm_api`)."""
    gpus = detect_gpus(catalog, nvml)
    gpu_check = Check(
        name="GPUs",
        status=CheckStatus.OK if gpus.gpus else CheckStatus.MISSING,
        detail=(f"{len(gpus.gpus)} GPU(s), driver {gpus.driver_version}" if gpus.gpus
                else gpus.problem or "NVML reports no GPU"),
        needed_for="trtllm-* targets (the reference target runs on the CPU)",
    )
    checks = (python_check(), numpy_check(), gpu_check, _triton_check(), _ucxx_check(),
              _trtllm_check(), llm_api_check(load_llm_api))
    return DoctorReport(checks=checks, gpus=gpus)
