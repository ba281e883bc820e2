"""One interface for every target: the questions a pinned software stack answers.

pdtrt's stages never branch on the target. The spec rules, :func:`pdtrt.builder.plan.plan_build`,
:func:`pdtrt.builder.run.run_build`, :func:`pdtrt.repo.plan.plan_repo` and ``repo validate`` ask
the target's :class:`TargetSupport` (found in :mod:`pdtrt.targets.registry`):

- **spec** -- does it need a GPU, can a pool live in another Triton server, which rules of its
  own a spec must follow (:meth:`~TargetSupport.spec_issues`);
- **engine limits** -- the ``max_num_tokens`` / ``max_batch_size`` its engines use when the
  spec leaves them out (:attr:`~TargetSupport.engine_defaults`);
- **build** -- its container, which profile switches its engines take, what its builds read
  and the steps shared by both phases, each phase's steps (after its own build rules), the
  checks of the build host, and how it runs its in-process steps;
- **repository** -- its engine model (backend, I/O table, decoupling, parameters), where
  pre/postprocessing find the tokenizer, and how the repository is launched (a
  :class:`~pdtrt.blueprint.launch.LaunchPlan` and the files that start it, or none), and what
  its engine backend needs of an engine model's parameters (``repo validate``).

A target is one module (``pdtrt/targets/<name>.py``, with its data under
``pdtrt/data/targets/``) defining one subclass, registered in :mod:`pdtrt.targets.registry`.
The interface is shaped for the GPU targets to come: trtllm-1.2 has no trtllm-build step, but a
per-phase LLM-API options file (an in-process step, :meth:`~TargetSupport.run_in_process`) and
pdtrt's Python engine model (:func:`pdtrt.blueprint.triton_models.python_model`); Kubernetes
manifests will be more launch files. What is the same on every target -- settings from spec,
profile and model facts, the limits' resolution order, ensembles, router, pre/postprocessing,
manifests -- stays in :mod:`pdtrt.blueprint`, :mod:`pdtrt.builder` and :mod:`pdtrt.repo`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import LaunchPlan
from pdtrt.blueprint.limits import EngineDefaults
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.settings import EngineSettings
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.steps import BuildPlan, BuildStep
from pdtrt.blueprint.triton_models import EngineUse, ModelPlan, TemplateFile
from pdtrt.engine_io import ModelIO
from pdtrt.enums import Phase, Target, TritonBackend
from pdtrt.errors import SpecIssue
from pdtrt.facts.catalog import GPU
from pdtrt.facts.gpu_detect import GPUDetection, LocalGPU
from pdtrt.targets.toolchain import Toolchain

__all__ = ["BuildContext", "BuildHost", "BuildSource", "PhaseBuild", "TargetSupport",
           "matching_gpu"]


@dataclass(frozen=True, kw_only=True)
class BuildContext:
    """What every build question gets: the deployment, where its engines go, and the caller's
    directory of the target's build scripts (None: the target's default)."""

    dep: Deployment
    layout: EngineLayout
    # every phase's settings as chosen (spec > profile > model facts), before the target's
    # own rules: what a phase's build may need of the other's (trtllm-1.2's aggregated
    # baseline takes the decode's batch)
    chosen: Mapping[Phase, EngineSettings]
    examples_dir: str | None = None

    @property
    def logs_dir(self) -> Path:
        return self.layout.deployment_dir / "logs"


@dataclass(frozen=True, kw_only=True)
class BuildSource:
    """What a target's builds read, and the steps both phases share (run first)."""

    model_dir: Path | None  # the HF checkpoint the steps read (None: nothing external)
    notes: tuple[str, ...]
    steps: tuple[BuildStep, ...]


@dataclass(frozen=True, kw_only=True)
class PhaseBuild:
    """One phase's engine as the target will build it: its settings after the target's own
    build rules, a note per adjustment, and its steps in run order."""

    settings: EngineSettings
    notes: tuple[str, ...]
    steps: tuple[BuildStep, ...]


def matching_gpu(detection: GPUDetection, compute_capability: str | None) -> LocalGPU | None:
    """The first local GPU of ``compute_capability``."""
    return next((g for g in detection.gpus if g.compute_capability == compute_capability), None)


@dataclass(frozen=True, kw_only=True)
class BuildHost:
    """What the checks before a real build found on this machine."""

    detection: GPUDetection | None  # None: the target builds without a GPU
    versions: dict[str, str | None]  # the manifest's ``versions``

    def manifest_gpu(self, gpu: GPU) -> tuple[str | None, str | None]:
        """Name and compute capability an engine for ``gpu`` records: the local GPU it was
        built on (``--force``: the first one), the catalog's when none; none without a GPU."""
        if self.detection is None:
            return None, None
        local = matching_gpu(self.detection, gpu.compute_capability) or (
            self.detection.gpus[0] if self.detection.gpus else None)
        if local is None:
            return gpu.name, gpu.compute_capability
        return local.name, local.compute_capability


class TargetSupport(ABC):
    """Everything pdtrt needs to know about one target; one subclass per target module."""

    # --- identity and spec ---------------------------------------------------------------
    @property
    @abstractmethod
    def target(self) -> Target:
        """The :class:`Target` this object answers for (its registry key)."""

    @property
    @abstractmethod
    def needs_gpu(self) -> bool:
        """Whether both pools must be NVIDIA GPUs (else any catalog device, the CPU too)."""

    @property
    @abstractmethod
    def supports_remote_pools(self) -> bool:
        """Whether a pool may be served by another Triton server (``<pool>.endpoint``)."""

    @property
    def supports_endpoint_pools(self) -> bool:
        """Whether a pool may have several models of this repository (``<pool>.endpoints``
        with ``model`` names): each an engine model of its own."""
        return False

    @abstractmethod
    def spec_issues(self, spec: DeploymentSpec) -> Iterator[SpecIssue]:
        """The violations of this target's own spec rules (the shared ones are
        :mod:`pdtrt.spec.rules`)."""

    # --- engine limits -------------------------------------------------------------------
    @property
    @abstractmethod
    def engine_defaults(self) -> EngineDefaults:
        """Engine limits when neither the spec nor a manifest states them."""

    # --- build ---------------------------------------------------------------------------
    @property
    @abstractmethod
    def container_image(self) -> str | None:
        """Where engines are built and the repository served (None: this machine)."""

    @property
    @abstractmethod
    def build_switches(self) -> tuple[str, ...]:
        """The profile switches its engine builds take (:data:`pdtrt.blueprint.settings.SWITCHES`
        or a subset), in the order they are shown."""

    @abstractmethod
    def build_source(self, ctx: BuildContext) -> BuildSource:
        """The checkpoint the builds read, notes about it, and the steps shared by both phases.
        """

    @abstractmethod
    def plan_phase(self, ctx: BuildContext, phase: Phase, settings: EngineSettings) -> PhaseBuild:
        """``phase``'s settings after the target's build rules, and its steps.

        Raises :class:`pdtrt.errors.BuildRejected` with every reason the phase cannot be built.
        """

    @abstractmethod
    def prepare_host(self, plan: BuildPlan, *, force: bool, nvml: Any,
                     toolchain: Toolchain | None) -> BuildHost:
        """Check this machine before ``plan`` runs (GPUs, tools, checkpoint) and say what it has.

        Raises :class:`pdtrt.errors.BuildError` (or a subclass) naming what is wrong.
        """

    @abstractmethod
    def run_in_process(self, step: BuildStep, dep: Deployment, *,
                       progress: Callable[[str], None] | None = None) -> None:
        """Run one of the target's in-process steps (``step.in_process``), writing
        ``step.output_dir``; ``progress`` receives a line now and then on long work (a
        download); raises :class:`pdtrt.errors.BuildError`."""

    @abstractmethod
    def step_inputs(self, step: BuildStep, dep: Deployment) -> dict[str, str]:
        """Hashes of what ``step`` reads besides its argv and input files (resume decisions)."""

    # --- repository ----------------------------------------------------------------------
    @property
    @abstractmethod
    def engine_io(self) -> ModelIO:
        """The engine model's I/O table (a superset of :data:`pdtrt.engine_io.CORE_ENGINE_IO`)."""

    @property
    @abstractmethod
    def engine_backend(self) -> TritonBackend:
        """The Triton backend of the prefill / decode / aggregated models."""

    @property
    @abstractmethod
    def engine_error_output(self) -> str:
        """The engine output carrying in-band phase errors to the router ("" = none)."""

    @abstractmethod
    def engine_decoupled(self, spec: DeploymentSpec) -> bool:
        """Whether the engine models (and so the router) are decoupled."""

    @abstractmethod
    def tokenizer_dir(self, dep: Deployment, layout: EngineLayout) -> str:
        """Where preprocessing and postprocessing load the tokenizer from."""

    @abstractmethod
    def plan_launch(self, dep: Deployment, engines: Sequence[EngineUse], *,
                    layout: EngineLayout, tokenizer_dir: str) -> LaunchPlan | None:
        """How a repository with ``engines`` is started (None: by pdtrt's embedded server).

        Raises :class:`pdtrt.errors.RepoError` for a value that cannot be written.
        """

    @abstractmethod
    def engine_model(self, dep: Deployment, engine: EngineUse, *,
                     launch: LaunchPlan | None) -> ModelPlan:
        """The config of the engine model ``engine`` (``launch``: :meth:`plan_launch`'s)."""

    @abstractmethod
    def launch_files(self, dep: Deployment, launch: LaunchPlan) -> tuple[TemplateFile, ...]:
        """The root files that start a repository with ``launch``."""

    def engine_config_problems(self, model: str, parameters: Mapping[str, str], *,
                               instance_count: int) -> list[str]:
        """Why the target's engine backend would not load ``model`` (a config of
        :attr:`engine_backend`, generated or hand-edited) or would ignore one of its
        ``parameters``; each message starts with ``model``. pdtrt's own Python engine models
        check their parameters in ``repo validate`` (``pdtrt_role``): none here."""
        return []
