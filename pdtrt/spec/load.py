"""Reading ``pdtrt.yaml``: YAML -> :class:`DeploymentSpec` -> :class:`Deployment`.

Every problem becomes a :class:`SpecIssue` naming the YAML path and line; all of them are raised
together in one :class:`SpecError`. :func:`load_spec` checks the spec on its own;
:func:`load_deployment` also resolves the model config and the GPUs and checks that the model
can be served as specified (TP vs heads, FP8 support, memory fit).
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.enums import Phase
from pdtrt.errors import ModelConfigError, SpecError, SpecIssue
from pdtrt.facts.catalog import Catalog, load_catalog
from pdtrt.facts.model import load_model_facts
from pdtrt.spec.rules import (
    endpoint_gpu_issues,
    phase_fit,
    resolve_gpus,
    resource_issues,
    shape_issues,
)
from pdtrt.suggest import did_you_mean
from pdtrt.yamlio import LineMap, load_yaml

__all__ = ["load_deployment", "load_spec", "parse_spec"]

_HINT = "see `pdtrt spec schema` for every key, or `pdtrt spec init` for a commented example"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class found by following ``loc`` from ``model`` (None if not one)."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = next(
            (a for a in (field.annotation, *typing.get_args(field.annotation))
             if isinstance(a, type) and issubclass(a, BaseModel)),
            None,
        )
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _message(err: Any) -> str:
    loc, kind, value = err["loc"], err["type"], err.get("input")
    if kind == "extra_forbidden":
        parent = _model_at(DeploymentSpec, loc[:-1])
        allowed = list(parent.model_fields) if parent else []
        return (f"unknown key '{loc[-1]}'{did_you_mean(str(loc[-1]), allowed)}; allowed keys: "
                f"{', '.join(allowed)}")
    if kind == "missing":
        return "required key is missing"
    if kind == "enum":
        expected = [e.strip("'") for e in err["ctx"]["expected"].replace(" or ", ", ").split(", ")]
        return f"{err['msg']}; got {value!r}{did_you_mean(str(value), expected)}"
    if kind == "model_type":
        return f"must be a mapping of keys, got {value!r}"
    if kind == "value_error":  # pdtrt's own validators: the message says it all
        return str(err["ctx"]["error"])
    return f"{err['msg']}; got {value!r}"


def _validation_issues(exc: ValidationError, lines: LineMap) -> list[SpecIssue]:
    issues = []
    for err in exc.errors(include_url=False):
        path = ".".join(str(p) for p in err["loc"])
        issues.append(SpecIssue(path=path, line=lines.line_of(path), message=_message(err)))
    return issues


def _with_lines(issues: list[SpecIssue], lines: LineMap) -> list[SpecIssue]:
    return [SpecIssue(path=i.path, message=i.message, line=i.line or lines.line_of(i.path))
            for i in issues]


def parse_spec(text: str, *, source: str = "<spec>") -> tuple[DeploymentSpec, LineMap]:
    """Validate spec text (shape and spec-only rules); raises :class:`SpecError`."""
    data, lines = load_yaml(text, source=source)
    if not isinstance(data, dict):
        raise SpecError([SpecIssue(path="", line=lines.line_of(""),
                                   message="a spec must be a YAML mapping of sections")],
                        source=source, hint=_HINT)
    try:
        spec = DeploymentSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_validation_issues(exc, lines), source=source, hint=_HINT) from None
    issues = shape_issues(spec)
    if issues:
        raise SpecError(_with_lines(issues, lines), source=source)
    return spec, lines


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([SpecIssue(path="", message="no such file")], source=str(path),
                        hint="create one with `pdtrt spec init`") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError([SpecIssue(path="", message=f"cannot read: {exc}")],
                        source=str(path)) from None


def load_spec(path: str | Path) -> DeploymentSpec:
    """Read and validate ``path`` on its own (no model config, no catalog)."""
    path = Path(path)
    return parse_spec(_read(path), source=str(path))[0]


def load_deployment(path: str | Path, *, catalog: Catalog | None = None) -> Deployment:
    """Read ``path`` and resolve it against its model config and the GPU catalog.

    Raises :class:`SpecError` listing every problem (with YAML paths and lines).
    """
    path = Path(path)
    source = str(path)
    spec, lines = parse_spec(_read(path), source=source)
    catalog = catalog or load_catalog()
    base_dir = path.resolve().parent
    model_ref: str | Path = base_dir / spec.model.path if spec.model.path else spec.model.name
    if spec.model.path and spec.model.path.endswith(".gguf"):
        model_ref = spec.model.name  # a GGUF has no config.json: the facts of the name's config
    try:
        model = load_model_facts(model_ref)
    except ModelConfigError as exc:
        where = "model.path" if spec.model.path else "model.name"
        raise SpecError([SpecIssue(path=where, line=lines.line_of(where), message=exc.message)],
                        source=source, hint=exc.hint) from None
    if spec.model.path:
        model = model.renamed(spec.model.name)
    gpus, issues = resolve_gpus(spec, catalog)
    issues += resource_issues(spec, model, gpus) + endpoint_gpu_issues(spec, model, catalog)
    if issues:
        raise SpecError(_with_lines(issues, lines), source=source)
    return Deployment(
        spec=spec,
        source=path,
        model=model,
        gpus=gpus,
        fits={p: phase_fit(spec, p, model, gpus[p]) for p in Phase},
    )
