"""How a TensorRT-LLM 0.21 engine is built: the command lines, and the checks of the build host.

Per phase, checkpoint conversion (``convert_checkpoint.py``, or ModelOpt's ``quantize.py`` when
FP8 or AWQ is involved) into ``<root>/<name>/checkpoints/<phase>/``, then ``trtllm-build`` into
``<root>/<name>/<phase>/``. TP/PP are baked into a checkpoint, so each phase converts its own.
Every argv is rendered by the target's flag schema (:mod:`pdtrt.targets.schema`), so a flag or
value TensorRT-LLM 0.21.0 would refuse raises :class:`BuildRejected` before anything runs.

Before a real run: every phase's GPU must be present locally with the same compute capability
(``force`` skips this; an engine only loads on the architecture it was built on), and the HF
checkpoint must be there with its weights.
"""

from __future__ import annotations

import os
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.settings import EngineSettings
from pdtrt.blueprint.steps import BuildPlan, BuildStep, StepKind
from pdtrt.enums import DType, KVDType, Phase, WeightQuant
from pdtrt.errors import BuildError, BuildRejected, GPUMismatchError
from pdtrt.facts.gpu_detect import GPUDetection
from pdtrt.targets.base import BuildContext, matching_gpu
from pdtrt.targets.schema import TargetSchema, Tool

__all__ = ["check_gpus", "check_model_dir", "engine_steps", "hf_model_ref", "model_dir"]

_TRT_DTYPE = {DType.BF16: "bfloat16", DType.FP16: "float16", DType.FP32: "float32"}


def _switch(value: object) -> str:
    return "enable" if value is True or value == "enable" else "disable"


def model_dir(dep: Deployment) -> tuple[Path, str | None]:
    """The HF checkpoint the conversion reads, and a note when the spec did not say."""
    if dep.spec.model.path:
        path = (dep.source.resolve().parent / dep.spec.model.path).resolve()
        return (path.parent if path.name == "config.json" else path), None
    path = Path("models") / dep.spec.model.name
    return path, (f"model.path is not set: the plan reads the Hugging Face checkpoint of "
                  f"{dep.spec.model.name} from {path} (download it there, or set model.path)")


def hf_model_ref(dep: Deployment) -> str:
    """The HF checkpoint as the serving container sees it: ``model.path``'s directory, made
    absolute (mounted at the same path), else the model's Hub name."""
    if dep.spec.model.path is None:
        return dep.spec.model.name
    path = Path(os.path.abspath(dep.source.parent / dep.spec.model.path))
    return str(path.parent if path.suffix == ".json" else path)


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


def engine_steps(schema: TargetSchema, ctx: BuildContext, phase: Phase, settings: EngineSettings,
                 *, examples: str, checkpoint: Path) -> tuple[BuildStep, BuildStep]:
    """``phase``'s conversion and ``trtllm-build`` steps for ``settings`` (already adjusted by
    :mod:`pdtrt.targets.trtllm_rules`); raises :class:`BuildRejected`."""
    dep = ctx.dep
    gpu, pool = dep.gpus[phase], dep.spec.pool(phase)
    ckpt_dir = ctx.layout.deployment_dir / "checkpoints" / str(phase)
    engine_dir = ctx.layout.phase_dir(phase)
    kind, argv = _conversion(schema, dep, phase, examples=examples, model_dir=checkpoint,
                             ckpt_dir=ckpt_dir)
    convert = BuildStep(
        name=f"{phase}-{kind}", kind=kind, phase=phase, argv=tuple(argv), inputs=(checkpoint,),
        output_dir=ckpt_dir, log_file=ctx.logs_dir / f"{phase}-{kind}.log", gpu=gpu)
    argv = _build_argv(schema, settings, ckpt_dir=ckpt_dir, engine_dir=engine_dir,
                       workers=pool.tp * pool.pp)
    build = BuildStep(
        name=f"{phase}-trtllm-build", kind=StepKind.TRTLLM_BUILD, phase=phase, argv=tuple(argv),
        inputs=(ckpt_dir,), output_dir=engine_dir,
        log_file=ctx.logs_dir / f"{phase}-trtllm-build.log", gpu=gpu)
    return convert, build


def check_gpus(plan: BuildPlan, detection: GPUDetection, *, force: bool) -> None:
    """Raise :class:`GPUMismatchError` unless every phase's GPU type is here (or ``force``)."""
    problems = []
    for ph in plan.phases:
        if matching_gpu(detection, ph.gpu.compute_capability) is None:
            seen = ", ".join(f"{g.name} (compute {g.compute_capability})"
                             for g in detection.gpus) or (detection.problem or "no GPU")
            problems.append(f"{ph.phase} engine is for {ph.gpu.key} (compute "
                            f"{ph.gpu.compute_capability}), this machine has: {seen}")
    if problems and not force:
        hosts = ", ".join(f"--phase {ph.phase} on a {ph.gpu.key} host" for ph in plan.phases)
        raise GPUMismatchError(
            "TensorRT engines only load on the GPU architecture they were built on:\n  "
            + "\n  ".join(problems),
            hint=f"build each phase on its own GPU type ({hosts}); --force builds anyway "
            "for the local GPU")


def check_model_dir(path: Path | None) -> None:
    """Raise :class:`BuildError` unless ``path`` is an HF checkpoint with weights."""
    if path is None or not (path / "config.json").is_file():
        raise BuildError(f"no Hugging Face checkpoint at {path} (config.json missing)",
                         hint="download the model there or set model.path")
    if not any(any(path.glob(g)) for g in ("*.safetensors", "*.bin")):
        raise BuildError(f"{path} has a config.json but no weights (*.safetensors, *.bin)",
                         hint="download the whole checkpoint, not only its config")
