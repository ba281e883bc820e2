"""The build plan: which steps make each phase's engine, with exact argv, GPU and directories.

``plan_build`` turns a :class:`Deployment` into a :class:`BuildPlan` without running anything:

- ``trtllm-0.21``: per phase, checkpoint conversion (``convert_checkpoint.py``, or ModelOpt's
  ``quantize.py`` when FP8 or AWQ is involved) into ``<root>/<name>/checkpoints/<phase>/``, then
  ``trtllm-build`` into ``<root>/<name>/<phase>/``. TP/PP are baked into a checkpoint, so each
  phase converts its own. Settings come from :mod:`pdtrt.build.settings`, TensorRT-LLM's
  adjustments from :mod:`pdtrt.targets.trtllm_rules`, and every argv is checked by the target's flag
  schema (:mod:`pdtrt.targets.schema`); a rejected combination raises before anything runs.
- ``reference``: the tokenizer into ``<root>/<name>/tokenizer/`` and the seeded HF checkpoint
  into each phase directory (in-process steps, no argv).

Running the plan is :mod:`pdtrt.build.run`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pdtrt.build.manifest import EngineLayout
from pdtrt.build.profiles import load_profiles, select_profile
from pdtrt.build.reference import real_checkpoint_dir
from pdtrt.build.settings import EngineSettings, resolve_settings
from pdtrt.enums import DType, KVDType, Phase, Target, WeightQuant
from pdtrt.envvars import PDTRT_TRTLLM_EXAMPLES
from pdtrt.errors import BuildRejected
from pdtrt.facts.catalog import GPU
from pdtrt.spec.deployment import Deployment
from pdtrt.targets.schema import TargetSchema, Tool, load_target_schema
from pdtrt.targets.trtllm_rules import apply_rules

__all__ = ["BuildPlan", "BuildStep", "PhasePlan", "StepKind", "plan_build"]

_TRT_DTYPE = {DType.BF16: "bfloat16", DType.FP16: "float16", DType.FP32: "float32"}


class StepKind(StrEnum):
    CONVERT_CHECKPOINT = "convert-checkpoint"
    QUANTIZE = "quantize"
    TRTLLM_BUILD = "trtllm-build"
    REFERENCE_TOKENIZER = "reference-tokenizer"
    REFERENCE_CHECKPOINT = "reference-checkpoint"

    @property
    def in_process(self) -> bool:
        return self in (StepKind.REFERENCE_TOKENIZER, StepKind.REFERENCE_CHECKPOINT)


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


def _switch(value: object) -> str:
    return "enable" if value is True or value == "enable" else "disable"


def _conversion(schema: TargetSchema, dep: Deployment, phase: Phase, *, examples: str,
                model_dir: Path, ckpt_dir: Path) -> tuple[StepKind, list[str]]:
    spec = dep.spec
    pool = spec.pool(phase)
    weights, kv = spec.weights(phase), spec.kv_cache_dtype(phase)
    common = {"model_dir": str(model_dir), "output_dir": str(ckpt_dir),
              "dtype": _TRT_DTYPE[spec.model.dtype], "tp_size": pool.tp, "pp_size": pool.pp}
    if weights in (WeightQuant.FP8, WeightQuant.INT4_AWQ) or kv is KVDType.FP8:
        qformat = {WeightQuant.FP8: "fp8", WeightQuant.INT4_AWQ: "int4_awq"}.get(
            weights, "full_prec")
        if weights in (WeightQuant.INT8_WEIGHT_ONLY, WeightQuant.INT4_WEIGHT_ONLY):
            qformat = "int8_wo" if weights is WeightQuant.INT8_WEIGHT_ONLY else "int4_wo"
        kv_flag = str(kv) if kv in (KVDType.FP8, KVDType.INT8) else None
        args = schema.render(Tool.QUANTIZE, {**common, "qformat": qformat,
                                             "kv_cache_dtype": kv_flag, "calib_size": 512})
        script = f"{examples}/{schema.quantize_script}"
        return StepKind.QUANTIZE, [schema.python, script, *args]
    script_rel = schema.convert_scripts.get(dep.model.model_type)
    if script_rel is None:
        raise BuildRejected([f"{phase}: {schema.target} has no convert_checkpoint.py for "
                             f"model_type '{dep.model.model_type}'"])
    args = schema.render(Tool.CONVERT_CHECKPOINT, {
        **common,
        "use_weight_only": weights in (WeightQuant.INT8_WEIGHT_ONLY,
                                       WeightQuant.INT4_WEIGHT_ONLY),
        "weight_only_precision": {WeightQuant.INT8_WEIGHT_ONLY: "int8",
                                  WeightQuant.INT4_WEIGHT_ONLY: "int4"}.get(weights),
        "int8_kv_cache": kv is KVDType.INT8,
        "workers": 1,
    })
    return StepKind.CONVERT_CHECKPOINT, [schema.python, f"{examples}/{script_rel}", *args]


def _build_argv(schema: TargetSchema, s: EngineSettings, *, ckpt_dir: Path, engine_dir: Path,
                workers: int) -> list[str]:
    values: dict[str, object] = {"checkpoint_dir": str(ckpt_dir), "output_dir": str(engine_dir)}
    for name in ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens",
                 "max_beam_width"):
        values[name] = s[name]
    values.update({
        "opt_num_tokens": s["opt_num_tokens"],
        "kv_cache_type": "paged",
        "gpt_attention_plugin": "auto",
        "gemm_plugin": s["gemm_plugin"],
        "remove_input_padding": "enable",
        "context_fmha": _switch(s["context_fmha"]),
        "use_paged_context_fmha": _switch(s["use_paged_context_fmha"]),
        "use_fp8_context_fmha": _switch(s["use_fp8_context_fmha"]),
        "tokens_per_block": s["tokens_per_block"],
        "multiple_profiles": _switch(s["multiple_profiles"]),
        "use_fused_mlp": _switch(s["use_fused_mlp"]),
        "reduce_fusion": _switch(s["reduce_fusion"]),
        "workers": workers,
    })
    return ["trtllm-build", *schema.render(Tool.TRTLLM_BUILD, values)]


def _model_dir(dep: Deployment) -> tuple[Path, str | None]:
    if dep.spec.model.path:
        path = (dep.source.resolve().parent / dep.spec.model.path).resolve()
        return (path.parent if path.name == "config.json" else path), None
    path = Path("models") / dep.spec.model.name
    return path, (f"model.path is not set: the plan reads the Hugging Face checkpoint of "
                  f"{dep.spec.model.name} from {path} (download it there, or set model.path)")


def plan_build(dep: Deployment, *, engines_root: Path, phases: tuple[Phase, ...] = tuple(Phase),
               profiles_dir: Path | None = None, examples_dir: str | None = None) -> BuildPlan:
    """Plan the builds of ``phases``; raises :class:`BuildRejected` listing every reason."""
    spec = dep.spec
    layout = EngineLayout(engines_root, spec.name)
    logs = layout.deployment_dir / "logs"
    profiles = load_profiles(profiles_dir)
    reference = spec.target is Target.REFERENCE
    schema = None if reference else load_target_schema(spec.target)
    examples = examples_dir or os.environ.get(PDTRT_TRTLLM_EXAMPLES) or (
        schema.examples_dir if schema else "")
    model_dir, model_note = (None, None) if reference else _model_dir(dep)
    notes: list[str] = [model_note] if model_note else []
    reasons: list[str] = []
    steps: list[BuildStep] = []
    real = None
    if reference:
        real = real_checkpoint_dir(dep)
        steps.append(BuildStep(
            name="tokenizer", kind=StepKind.REFERENCE_TOKENIZER, phase=None, argv=(),
            inputs=(), output_dir=layout.tokenizer_dir, log_file=logs / "tokenizer.log",
            gpu=None, what=f"byte-level BPE, vocab {dep.model.vocab_size}, trained on "
            "pdtrt/data/corpus/reference.txt (linked instead when model.path has "
            "tokenizer.json)"))
    phase_plans: list[PhasePlan] = []
    for phase in phases:
        gpu, pool = dep.gpus[phase], spec.pool(phase)
        settings = resolve_settings(dep, phase, select_profile(profiles, gpu.key, phase),
                                    switches=not reference)
        phase_notes: tuple[str, ...] = ()
        engine_dir = layout.phase_dir(phase)
        phase_steps: list[BuildStep] = []
        if reference:
            phase_steps.append(BuildStep(
                name=f"{phase}-checkpoint", kind=StepKind.REFERENCE_CHECKPOINT, phase=phase,
                argv=(), inputs=(), output_dir=engine_dir, log_file=logs / f"{phase}.log",
                gpu=None, what=(
                    f"links to the checkpoint at {real}" if real else
                    f"LlamaForCausalLM({spec.model.name} config) seeded with "
                    f"{spec.model.seed}, {spec.model.dtype}, "
                    "save_pretrained(safe_serialization=True)")))
        else:
            assert schema is not None and model_dir is not None
            try:
                outcome = apply_rules(settings, model=dep.model, gpu=gpu,
                                      weights=spec.weights(phase),
                                      kv_dtype=spec.kv_cache_dtype(phase), rules=schema.rules)
                settings, phase_notes = outcome.settings, outcome.notes
                ckpt_dir = layout.deployment_dir / "checkpoints" / str(phase)
                kind, argv = _conversion(schema, dep, phase, examples=examples,
                                         model_dir=model_dir, ckpt_dir=ckpt_dir)
                phase_steps.append(BuildStep(
                    name=f"{phase}-{kind}", kind=kind, phase=phase, argv=tuple(argv),
                    inputs=(model_dir,), output_dir=ckpt_dir,
                    log_file=logs / f"{phase}-{kind}.log", gpu=gpu))
                argv = _build_argv(schema, settings, ckpt_dir=ckpt_dir, engine_dir=engine_dir,
                                   workers=pool.tp * pool.pp)
                phase_steps.append(BuildStep(
                    name=f"{phase}-trtllm-build", kind=StepKind.TRTLLM_BUILD, phase=phase,
                    argv=tuple(argv), inputs=(ckpt_dir,), output_dir=engine_dir,
                    log_file=logs / f"{phase}-trtllm-build.log", gpu=gpu))
            except BuildRejected as exc:
                reasons += exc.reasons
                continue
        steps += phase_steps
        phase_plans.append(PhasePlan(
            phase=phase, gpu=gpu, tp=pool.tp, pp=pool.pp, weights=spec.weights(phase),
            kv_dtype=spec.kv_cache_dtype(phase), settings=settings, notes=phase_notes,
            engine_dir=engine_dir, steps=tuple(phase_steps)))
    tpbs = {p.phase: p.settings["tokens_per_block"] for p in phase_plans}
    if len(set(tpbs.values())) > 1:
        reasons.append("prefill and decode engines would use different tokens_per_block "
                       f"({', '.join(f'{k} {v}' for k, v in tpbs.items())}); KV blocks could not "
                       "be handed over; set <pool>.engine.tokens_per_block in the spec")
    if reasons:
        raise BuildRejected(reasons, hint="fix the spec (or the engine profile) and run "
                            "`pdtrt build SPEC --dry-run` again")
    return BuildPlan(deployment=spec.name, target=spec.target,
                     container=schema.container if schema else None, model_dir=model_dir,
                     layout=layout, phases=tuple(phase_plans), steps=tuple(steps),
                     notes=tuple(notes))
