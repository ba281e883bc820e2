"""The TensorRT-LLM toolchain of the current environment, checked against a target.

An engine only loads with the TensorRT and TensorRT-LLM versions it was built with, so
``pdtrt build`` refuses to run unless ``tensorrt_llm`` here is exactly the target's version and
every tool the plan calls exists (``trtllm-build`` on ``PATH``, the example scripts under the
examples directory). Versions are read from installed distributions (no ``import
tensorrt_llm``: it needs CUDA and prints a banner); CUDA from the NGC ``CUDA_VERSION`` variable.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pdtrt.blueprint.steps import BuildPlan
from pdtrt.envvars import CUDA_VERSION
from pdtrt.errors import ToolchainError
from pdtrt.targets.schema import load_target_schema

__all__ = ["Toolchain", "check_toolchain", "dist_version"]


def dist_version(dist: str) -> str | None:
    """Installed version of distribution ``dist`` (None when absent). Tests replace this."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    versions: dict[str, str | None]  # tensorrt_llm, tensorrt, cuda


def check_toolchain(plan: BuildPlan) -> Toolchain:
    """Versions of the local toolchain; raises :class:`ToolchainError` listing what is wrong."""
    schema = load_target_schema(plan.target)
    versions = {
        "tensorrt_llm": dist_version("tensorrt_llm") or dist_version("tensorrt-llm"),
        "tensorrt": dist_version("tensorrt") or dist_version("tensorrt-cu12"),
        "cuda": os.environ.get(CUDA_VERSION),
    }
    problems = []
    want = schema.versions["tensorrt_llm"]
    if versions["tensorrt_llm"] != want:
        problems.append(f"TensorRT-LLM here is {versions['tensorrt_llm'] or 'not installed'}, "
                        f"target {plan.target} needs {want} (engines only load with the "
                        "version they were built with)")
    for step in plan.steps:
        if not step.argv:
            continue
        tool = step.argv[1] if step.argv[0] == schema.python else step.argv[0]
        found = Path(tool).is_file() if "/" in tool else shutil.which(tool) is not None
        if not found:
            problems.append(f"{step.name}: {tool} not found")
    if problems:
        raise ToolchainError(
            "the TensorRT-LLM toolchain does not match the target:\n  "
            + "\n  ".join(dict.fromkeys(problems)),
            hint=f"run inside {schema.container} with TensorRT-LLM's v{want} examples at "
            f"{schema.examples_dir} (or PDTRT_TRTLLM_EXAMPLES); see docs/build.md")
    return Toolchain(versions=versions)
