"""``pdtrt preflight REPO``: can this environment run the repository's models? Asked before
the server starts, in the container it will run in.

Triton loads a Python model only when it loads the model, and pdtrt's router imports its gRPC
client (``tritonclient``) only at its first request: a missing package shows as a model that
fails to load, or as a server that is ready and fails every request. The preflight finds both
first, in one process, and reports every problem at once:

- the versions that decide what runs (Python, numpy, TensorRT-LLM, tritonclient, transformers,
  pdtrt), numpy < 2 (TensorRT-LLM 1.2 pins it, and the embedded Triton 2.51 stub sends empty
  tensors with numpy 2);
- every model's ``1/model.py`` imported as its stub would import it (with a stand-in
  ``triton_python_backend_utils`` where the real one is not importable outside a stub);
- the modules pdtrt imports later than the models' import: ``tritonclient.grpc`` (the router's
  phase calls, ``pdtrt serve``'s supervisor), ``transformers`` (the tokenizer models), and what
  the target's serving image recipe installs (:mod:`pdtrt.targets.image`);
- the engine model's LLM-API surface check (:func:`pdtrt.facts.doctor.llm_api_check`):
  TensorRT-LLM itself for a trtllm-1.2 repository (pdtrt's CPU twin does not count there), the
  library the stub would load for the reference target.

Nothing is started and nothing is written; :class:`PreflightReport` is what the CLI renders.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtrt.enums import Target
from pdtrt.facts.doctor import (
    Check,
    CheckStatus,
    dist_version,
    llm_api_check,
    numpy_check,
    python_check,
)
from pdtrt.targets.image import load_image_recipe

__all__ = ["PreflightReport", "run_preflight"]

_REPO_MANIFEST = "pdtrt-repo.json"
_STUB_UTILS = "triton_python_backend_utils"
# imported by pdtrt after the models' own import: the router's phase client and the supervisor
# (tritonclient), the pre/postprocessing models' tokenizers (transformers)
_LATE_IMPORTS = {"tritonclient.grpc": "the router's gRPC phase calls and pdtrt serve's "
                 "supervisor", "transformers": "the pre- and postprocessing tokenizers"}
_VERSIONS = ("numpy", "tensorrt_llm", "tritonclient", "transformers", "pdtrt")


@dataclass(frozen=True, kw_only=True)
class PreflightReport:
    repository: Path
    target: str  # from pdtrt-repo.json; "" for a repository pdtrt did not generate
    versions: dict[str, str | None]  # python and the distributions that decide what runs
    checks: tuple[Check, ...]

    @property
    def problems(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is not CheckStatus.OK)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {"repository": str(self.repository), "target": self.target, "ok": self.ok,
                "versions": dict(self.versions), "checks": [c.to_dict() for c in self.checks]}


def _model_files(repository: Path) -> list[Path]:
    return sorted(p for p in repository.glob("*/1/model.py") if p.is_file())


def _import_model(path: Path) -> Check:
    """Import ``path`` under a name of its own, as the model's stub would."""
    model = path.parent.parent.name
    needed = f"model {model!r} ({path})"
    spec = importlib.util.spec_from_file_location(f"pdtrt_preflight_{model}", path)
    assert spec is not None and spec.loader is not None  # a .py file always has one
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except Exception as exc:  # noqa: BLE001 -- any failure is this model's load failure
        return Check(name=f"import {model}", status=CheckStatus.PROBLEM,
                     detail=f"{type(exc).__name__}: {exc}", needed_for=needed)
    return Check(name=f"import {model}", status=CheckStatus.OK, detail=str(path),
                 needed_for=needed)


@contextmanager
def _stub_utils() -> Iterator[None]:
    """A stand-in ``triton_python_backend_utils`` while the models import, where the real one
    is not importable (outside a stub it is not on the path; the shims only pass it on)."""
    if _STUB_UTILS in sys.modules or importlib.util.find_spec(_STUB_UTILS) is not None:
        yield
        return
    sys.modules[_STUB_UTILS] = types.ModuleType(_STUB_UTILS)
    try:
        yield
    finally:
        del sys.modules[_STUB_UTILS]


def _import_module(module: str, needed: str) -> Check:
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 -- reported, with the exception
        return Check(name=f"import {module}", status=CheckStatus.MISSING,
                     detail=f"{type(exc).__name__}: {exc}", needed_for=needed)
    return Check(name=f"import {module}", status=CheckStatus.OK, detail="ok", needed_for=needed)


def _late_imports(target: Target | None) -> dict[str, str]:
    modules = dict(_LATE_IMPORTS)
    if target is Target.TRTLLM_1_2:
        for req in load_image_recipe(target).installed:
            if req.module:
                modules.setdefault(req.module, f"{req.why} (the image recipe installs "
                                   f"{req.requirement})")
    return modules


def run_preflight(repository: Path, *,
                  load_llm_api: Callable[[], Any] | None = None) -> PreflightReport:
    """Check ``repository``'s needs in this interpreter (see the module's docstring).
    ``load_llm_api`` replaces the LLM API's loader (tests); by default a trtllm-1.2 repository
    needs ``tensorrt_llm`` itself."""
    manifest_file = repository / _REPO_MANIFEST
    manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    text = str(manifest.get("target", ""))
    target = Target(text) if text in tuple(Target) else None
    checks = [python_check(), numpy_check()]
    with _stub_utils():
        checks += [_import_model(path) for path in _model_files(repository)]
    checks += [_import_module(m, why) for m, why in sorted(_late_imports(target).items())]
    if target in (Target.TRTLLM_1_2, Target.REFERENCE):  # pdtrt's LLM-API engine models
        checks.append(llm_api_check(load_llm_api,
                                    require_tensorrt_llm=target is Target.TRTLLM_1_2))
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    versions.update({d: dist_version(d) for d in _VERSIONS})
    return PreflightReport(repository=repository, target=text, versions=versions,
                           checks=tuple(checks))
