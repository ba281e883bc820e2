"""Rendering a :class:`RepoPlan` into files: jinja2 templates, then Triton's schema.

The templates in ``model_repo_templates/`` get values that are already strings -- quoted
protobuf literals, ``"true"``/``"false"``, dims text, and lists for optional blocks -- so they
need no logic. Every rendered ``config.pbtxt`` is parsed back with ``model_config_pb2`` and its
name checked; a failure is a bug in pdtrt (:class:`GeneratedConfigBug`, not a user error). The
target's root files (:attr:`RepoPlan.root_files`: trtllm-0.21's ``pdtrt.env`` and ``launch.sh``)
are rendered from the templates and values the target chose. The result is a mapping of
relative paths to text, identical for identical inputs.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import jinja2

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.triton_models import EnsemblePlan, ModelPlan, RepoPlan
from pdtrt.engine_io import ModelIO, ModelName, Role, TensorSpec
from pdtrt.errors import ConfigParseError
from pdtrt.repo.pbtxt import parse_config, quote
from pdtrt.version import __version__

__all__ = ["REPO_MANIFEST_NAME", "GeneratedConfigBug", "RenderedRepo", "render_repo",
           "spec_sha256"]

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "model_repo_templates"
REPO_MANIFEST_NAME = "pdtrt-repo.json"
REPO_MANIFEST_VERSION = 1

_COMMENTS = {
    ModelName.ENSEMBLE: "Text in, text out (NVIDIA's ensemble I/O): preprocessing -> router -> "
                        "postprocessing.",
    ModelName.ENSEMBLE_AGGREGATED: "Text in, text out: preprocessing -> aggregated -> "
                                   "postprocessing (the aggregated baseline).",
    ModelName.PREPROCESSING: "Tokenizer: text_input -> input ids (NVIDIA's preprocessing I/O).",
    ModelName.ROUTER: "pdtrt's disaggregated router: prefill (context_only) -> decode "
                      "(generation_only), streaming.",
    ModelName.PREFILL: "Engine model for context-only requests (the prefill pool).",
    ModelName.DECODE: "Engine model for generation-only requests (the decode pool).",
    ModelName.AGGREGATED: "Engine model doing both phases (context_and_generation): the "
                          "baseline.",
    ModelName.POSTPROCESSING: "Detokenizer: output ids -> text_output (NVIDIA's postprocessing "
                              "I/O).",
    ModelName.HEALTH: "Readiness marker: loaded while every phase has a healthy endpoint "
                      "(pdtrt serve's supervisor); /v2/models/health/ready is the readiness.",
}
# engine models of further local endpoints (decode_b, ...), by role
_ENDPOINT_COMMENTS = {
    Role.PREFILL: "Engine model for context-only requests: another endpoint of the prefill "
                  "pool.",
    Role.DECODE: "Engine model for generation-only requests: another endpoint of the decode "
                 "pool.",
    Role.AGGREGATED: "Engine model doing both phases: another endpoint of the aggregated path.",
}


# Not a PdtrtError on purpose: the CLI prints those as an expected failure without a traceback,
# and a config pdtrt rendered wrong is a bug in pdtrt, whose traceback must reach the report.
class GeneratedConfigBug(RuntimeError):
    """pdtrt rendered a ``config.pbtxt`` that Triton's schema rejects: a bug in pdtrt."""


@dataclass(frozen=True, kw_only=True)
class RenderedRepo:
    files: dict[str, str]  # relative path -> text, sorted by path
    dirs: tuple[str, ...]  # directories that must exist even when empty (version dirs)
    executables: tuple[str, ...]


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
        autoescape=False, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _dims(dims: tuple[int, ...]) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def _tensor_view(t: TensorSpec, sep: str, *, is_input: bool) -> dict[str, object]:
    flags = [f"optional: {'true' if t.optional else 'false'}"] if is_input else []
    if t.ragged:
        flags.append("allow_ragged_batch: true")
    return {"name": quote(t.name), "dtype": str(t.dtype), "dims": _dims(t.dims),
            "reshape": ["[ ]"] if t.reshape_scalar else [], "flags": flags, "sep": sep}


def _tensors(items: tuple[TensorSpec, ...], *, is_input: bool) -> list[dict[str, object]]:
    return [_tensor_view(t, "," if i < len(items) - 1 else "", is_input=is_input)
            for i, t in enumerate(items)]


def _io_views(io: ModelIO) -> dict[str, object]:
    return {"inputs": _tensors(io.inputs, is_input=True),
            "outputs": _tensors(io.outputs, is_input=False)}


def _comment(m: ModelPlan) -> str:
    if m.name in _COMMENTS:
        return _COMMENTS[ModelName(m.name)]
    assert m.role is not None, m
    return _ENDPOINT_COMMENTS[m.role]


def _model_view(m: ModelPlan) -> dict[str, object]:
    return {
        "pdtrt_version": __version__,
        "comment": _comment(m), "name": quote(m.name),
        "backend": quote(m.backend), "max_batch_size": m.max_batch_size,
        "decoupled": "true" if m.decoupled else "false",
        "dynamic_batching": [m.max_batch_size] if m.dynamic_batching else [],
        "instance_count": m.instance_count,
        "parameters": [{"key": quote(k), "value": quote(v)} for k, v in m.parameters],
        **_io_views(m.io),
    }


def _ensemble_view(e: EnsemblePlan) -> dict[str, object]:
    steps = [{"model": quote(name),
              "inputs": [(quote(k), quote(v)) for k, v in step.inputs],
              "outputs": [(quote(k), quote(v)) for k, v in step.outputs],
              "sep": "," if i < len(e.steps) - 1 else ""}
             for i, (name, step) in enumerate(e.steps)]
    return {"pdtrt_version": __version__, "comment": _COMMENTS[e.name], "name": quote(e.name),
            "max_batch_size": e.max_batch_size, "steps": steps, **_io_views(e.io)}


def _checked(name: str, text: str) -> str:
    try:
        config = parse_config(text)
    except ConfigParseError as exc:
        raise GeneratedConfigBug(
            f"BUG in pdtrt: the generated {name}/config.pbtxt does not parse with Triton's "
            f"model_config schema: {str(exc).rstrip('.')}. Please report it with the "
            "spec.") from None
    if config.name != name:
        raise GeneratedConfigBug(f"BUG in pdtrt: {name}/config.pbtxt names {config.name!r}")
    return text


def spec_sha256(dep: Deployment) -> str:
    """SHA-256 of the spec's canonical JSON (comments and key order do not change it)."""
    text = json.dumps(dep.spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def repo_manifest(dep: Deployment, plan: RepoPlan) -> dict[str, object]:
    """The content of ``pdtrt-repo.json``."""
    data: dict[str, object] = {
        "repo_manifest_version": REPO_MANIFEST_VERSION,
        "pdtrt_version": __version__,
        "spec_sha256": spec_sha256(dep),
        "deployment": dep.spec.name,
        "target": str(plan.target),
        "mode": str(plan.mode),
        "models": sorted([str(m.name) for m in plan.models] + [str(e.name)
                                                               for e in plan.ensembles]),
        "engine_dirs": {str(k): str(v) for k, v in sorted(plan.engine_dirs.items())},
        "tokenizer_dir": plan.tokenizer_dir,
        "remote_pools": {str(k): v for k, v in sorted(plan.remote.items())},
        "limits": {str(p): lim.to_dict() for p, lim in plan.limits.items()},
        "spec": dep.spec.model_dump(mode="json"),
    }
    if plan.launch is not None:
        data["launch"] = plan.launch.to_manifest()
    return data


def render_repo(dep: Deployment, plan: RepoPlan) -> RenderedRepo:
    """Every file of the repository; raises :class:`GeneratedConfigBug` on a schema failure."""
    env = _env()
    files: dict[str, str] = {}
    dirs: list[str] = []
    for m in plan.models:
        files[f"{m.name}/config.pbtxt"] = _checked(
            m.name, env.get_template("model.pbtxt.j2").render(**_model_view(m)))
        dirs.append(f"{m.name}/1")
        if m.shim_module is not None:
            files[f"{m.name}/1/model.py"] = env.get_template("model.py.j2").render(
                pdtrt_version=__version__, role=str(m.role), module=m.shim_module)
        elif m.name == ModelName.HEALTH:
            files[f"{m.name}/1/model.py"] = env.get_template("health_model.py.j2").render(
                pdtrt_version=__version__)
    for e in plan.ensembles:
        files[f"{e.name}/config.pbtxt"] = _checked(
            e.name, env.get_template("ensemble.pbtxt.j2").render(**_ensemble_view(e)))
        dirs.append(f"{e.name}/1")
    for f in plan.root_files:
        files[f.path] = env.get_template(f.template).render(pdtrt_version=__version__,
                                                            **f.values)
    executables = [f.path for f in plan.root_files if f.executable]
    files[REPO_MANIFEST_NAME] = json.dumps(repo_manifest(dep, plan), indent=2,
                                           sort_keys=True) + "\n"
    return RenderedRepo(files=dict(sorted(files.items())), dirs=tuple(sorted(dirs)),
                        executables=tuple(executables))
