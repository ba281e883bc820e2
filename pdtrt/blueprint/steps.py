"""The build plan as data: its steps, each phase's part, and the whole plan.

A :class:`BuildStep` is one thing that writes one output directory: an external command
(``argv``, run as a subprocess) or an in-process step of the target (no ``argv``; the target
runs it, see :meth:`pdtrt.targets.base.TargetSupport.run_in_process`). :class:`PhasePlan` is one
phase's engine -- its GPU, settings, notes and steps -- and :class:`BuildPlan` the whole
deployment, steps in run order. Making a plan is :mod:`pdtrt.builder.plan`; running it is
:mod:`pdtrt.builder.run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.settings import EngineSettings
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.facts.catalog import GPU

__all__ = ["BuildPlan", "BuildStep", "PhasePlan", "StepKind"]


class StepKind(StrEnum):
    CONVERT_CHECKPOINT = "convert-checkpoint"
    QUANTIZE = "quantize"
    TRTLLM_BUILD = "trtllm-build"
    REFERENCE_TOKENIZER = "reference-tokenizer"
    REFERENCE_CHECKPOINT = "reference-checkpoint"
    HF_PTQ = "hf-ptq"  # ModelOpt FP8 quantization to a Hugging Face checkpoint (trtllm-1.2)
    LLM_OPTIONS = "llm-options"  # the phase's LLM-API options file (trtllm-1.2, in-process)
    HF_SNAPSHOT = "hf-snapshot"  # the model's Hub snapshot, resolved before serving (trtllm-1.2)


@dataclass(frozen=True, kw_only=True)
class BuildStep:
    name: str  # e.g. "prefill-quantize"; also the log file's stem
    kind: StepKind
    phase: Phase | None  # None: shared by both phases (the reference tokenizer)
    argv: tuple[str, ...]  # empty for in-process steps
    inputs: tuple[Path, ...]  # whose content decides whether the step must run again
    output_dir: Path
    log_file: Path
    gpu: GPU | None  # the GPU type the step must run on (None: any machine)
    what: str = ""  # in-process steps: what they write
    content: str = ""  # in-process steps whose output the plan computes: the text they write

    @property
    def in_process(self) -> bool:
        """A step the target runs itself (an external step always has a command line)."""
        return not self.argv

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": str(self.kind),
            "phase": None if self.phase is None else str(self.phase),
            "argv": list(self.argv),
            "what": self.what,
            "inputs": [str(p) for p in self.inputs],
            "output_dir": str(self.output_dir),
            "log_file": str(self.log_file),
            "gpu": None if self.gpu is None else {
                "key": self.gpu.key, "compute_capability": self.gpu.compute_capability},
        }


@dataclass(frozen=True, kw_only=True)
class PhasePlan:
    phase: Phase
    gpu: GPU
    tp: int
    pp: int
    weights: WeightQuant
    kv_dtype: KVDType
    settings: EngineSettings
    notes: tuple[str, ...]
    engine_dir: Path
    steps: tuple[BuildStep, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "phase": str(self.phase), "gpu": self.gpu.key,
            "compute_capability": self.gpu.compute_capability, "tp": self.tp, "pp": self.pp,
            "weights": str(self.weights), "kv_cache_dtype": str(self.kv_dtype),
            "profile": self.settings.profile, "settings": self.settings.to_dict(),
            "notes": list(self.notes), "engine_dir": str(self.engine_dir),
            "steps": [s.name for s in self.steps],
        }


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    deployment: str
    target: Target
    container: str | None
    model_dir: Path | None  # the HF checkpoint the conversion reads (engine targets)
    layout: EngineLayout
    phases: tuple[PhasePlan, ...]
    steps: tuple[BuildStep, ...]  # in run order
    notes: tuple[str, ...]

    def phase(self, phase: Phase) -> PhasePlan:
        return next(p for p in self.phases if p.phase is phase)

    def to_dict(self) -> dict[str, object]:
        return {
            "deployment": self.deployment, "target": str(self.target),
            "container": self.container,
            "model_dir": None if self.model_dir is None else str(self.model_dir),
            "engines_dir": str(self.layout.deployment_dir),
            "phases": [p.to_dict() for p in self.phases],
            "steps": [s.to_dict() for s in self.steps], "notes": list(self.notes),
        }
