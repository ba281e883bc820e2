"""The repository plan as data: every model's config as typed values, and the root files.

:class:`ModelPlan` is one backend model (what its ``config.pbtxt`` says), :class:`EnsemblePlan`
one ensemble, :class:`RepoPlan` the whole repository. :class:`EngineUse` is one engine model
before its target has said what it looks like (which model, which phase's engine and pool, its
limits). :class:`TemplateFile` is a root file a target adds (trtllm-0.21: ``pdtrt.env``,
``launch.sh``) with the values its template formats. Making a plan is :mod:`pdtrt.repo.plan`;
rendering it is :mod:`pdtrt.repo.render`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pdtrt.blueprint.launch import LaunchPlan
from pdtrt.blueprint.limits import PhaseLimits
from pdtrt.engine_io import ModelIO, ModelName, Role
from pdtrt.ensemble import StepMap
from pdtrt.enums import Phase, Target, TritonBackend

__all__ = ["SHIM_MODULES", "EngineUse", "EnsemblePlan", "ModelPlan", "RepoMode", "RepoPlan",
           "TemplateFile", "health_model", "param_flag", "param_number", "python_model"]

SHIM_MODULES = {
    Role.PREFILL: "pdtrt.runtime.engine.model",
    Role.DECODE: "pdtrt.runtime.engine.model",
    Role.AGGREGATED: "pdtrt.runtime.engine.model",
    Role.ROUTER: "pdtrt.runtime.router.model",
    Role.PREPROCESSING: "pdtrt.runtime.text.preprocessing",
    Role.POSTPROCESSING: "pdtrt.runtime.text.postprocessing",
}


class RepoMode(StrEnum):
    DISAGGREGATED = "disaggregated"
    AGGREGATED = "aggregated"
    BOTH = "both"
    # only the engine models of the pools that have an `endpoint`: the server another
    # server's router calls (no ensembles, router or tokenizer models)
    POOLS = "pools"

    @property
    def has_disaggregated(self) -> bool:
        return self in (RepoMode.DISAGGREGATED, RepoMode.BOTH)

    @property
    def has_aggregated(self) -> bool:
        return self in (RepoMode.AGGREGATED, RepoMode.BOTH)


@dataclass(frozen=True, kw_only=True)
class EngineUse:
    """An engine model of the repository, and the phase whose engine and pool it uses."""

    model: str  # ModelName, or another local endpoint's name (decode_b)
    role: Role
    phase: Phase
    engine_dir: Path
    limits: PhaseLimits
    instances: int = 1  # model instances (the endpoint's)


@dataclass(frozen=True, kw_only=True)
class ModelPlan:
    name: str  # ModelName, or another local endpoint's name
    role: Role | None  # None: the readiness marker (no pdtrt role, no parameters)
    backend: TritonBackend
    max_batch_size: int
    decoupled: bool
    io: ModelIO
    instance_count: int
    parameters: tuple[tuple[str, str], ...]
    dynamic_batching: bool  # NVIDIA's engine-model queue (preferred batch = max_batch_size)
    shim_module: str | None  # the pdtrt module a Python model's 1/model.py imports


@dataclass(frozen=True, kw_only=True)
class EnsemblePlan:
    name: ModelName
    max_batch_size: int
    io: ModelIO
    steps: tuple[tuple[ModelName, StepMap], ...]


@dataclass(frozen=True, kw_only=True)
class TemplateFile:
    """A root file of the repository: ``template`` (in ``model_repo_templates/``) formatting
    ``values`` that are already computed (the template has no logic)."""

    path: str
    template: str
    values: Mapping[str, object]
    executable: bool = False


@dataclass(frozen=True, kw_only=True)
class RepoPlan:
    target: Target
    mode: RepoMode
    models: tuple[ModelPlan, ...]
    ensembles: tuple[EnsemblePlan, ...]
    engine_dirs: dict[str, Path]
    tokenizer_dir: str
    limits: dict[Phase, PhaseLimits]
    launch: LaunchPlan | None
    remote: dict[str, str] = field(default_factory=dict)  # pool -> HOST:PORT[,HOST:PORT...]
    root_files: tuple[TemplateFile, ...] = ()  # the target's launch artifacts


def param_flag(value: bool) -> str:
    """A boolean as a model parameter's text."""
    return "true" if value else "false"


def param_number(value: float) -> str:
    """A number as a model parameter's text (``30``, ``0.85``)."""
    return f"{value:g}"


def python_model(name: str, role: Role, *, batch: int, decoupled: bool, io: ModelIO,
                 count: int, params: tuple[tuple[str, str], ...],
                 shim_module: str | None = None) -> ModelPlan:
    """A pdtrt Python model: its ``1/model.py`` imports ``shim_module``, by default
    :data:`SHIM_MODULES` ``[role]`` (a target serving another module says which)."""
    return ModelPlan(name=name, role=role, backend=TritonBackend.PYTHON, max_batch_size=batch,
                     decoupled=decoupled, io=io, instance_count=count, parameters=params,
                     dynamic_batching=False, shim_module=shim_module or SHIM_MODULES[role])


def health_model() -> ModelPlan:
    """The readiness marker ``health``: a Python model with no inputs, no outputs and no
    pdtrt import (so it loads in any container with the Python backend). Nobody calls it;
    what matters is whether it is *loaded*: ``pdtrt serve``'s supervisor loads it while every
    phase has a healthy endpoint and unloads it while one has none, so Triton's
    ``/v2/models/health/ready`` tells the truth (:data:`pdtrt.engine_io.READINESS_PATH`)."""
    return ModelPlan(name=ModelName.HEALTH, role=None, backend=TritonBackend.PYTHON,
                     max_batch_size=1, decoupled=False, io=ModelIO(inputs=(), outputs=()),
                     instance_count=1, parameters=(), dynamic_batching=False, shim_module=None)
