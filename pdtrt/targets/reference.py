"""Target ``reference``: pdtrt's own CPU engine, on any machine, in the embedded Triton server.

Its "engines" are a seeded Llama-family Hugging Face checkpoint per phase and an offline-trained
tokenizer (:mod:`pdtrt.targets.reference_checkpoint`), written by in-process steps; its engine
model is the ``trtllm-1.2`` target's LLM-API engine model (:mod:`pdtrt.runtime.engine.model`) over
pdtrt's CPU reference of the LLM API (:mod:`pdtrt.llmapi.reference`), always decoupled,
reporting phase errors in band; pdtrt's embedded server starts it, so it has no launch
artifacts. Its pools may live in other Triton servers (``<pool>.endpoint``). It has no data
file: nothing of it is pinned to an upstream release.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import LaunchPlan
from pdtrt.blueprint.limits import TRTLLM_BUILD_DEFAULTS
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.settings import EngineSettings
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.steps import BuildPlan, BuildStep, StepKind
from pdtrt.blueprint.triton_models import (
    EngineUse,
    ModelPlan,
    TemplateFile,
    param_flag,
    param_number,
    python_model,
)
from pdtrt.engine_io import ERROR_OUTPUT, REFERENCE_ENGINE_IO, Param, Role
from pdtrt.enums import Phase, Target, TritonBackend, WeightQuant
from pdtrt.errors import BuildError, SpecIssue
from pdtrt.targets.base import BuildContext, BuildHost, BuildSource, PhaseBuild, TargetSupport
from pdtrt.targets.checkpoint_source import SourceKind, checkpoint_source
from pdtrt.targets.reference_checkpoint import (
    checkpoint_inputs,
    reference_versions,
    tokenizer_inputs,
    write_reference_checkpoint,
    write_reference_tokenizer,
)
from pdtrt.targets.toolchain import Toolchain

__all__ = ["ReferenceTarget", "engine_parameters"]


def engine_parameters(dep: Deployment, engine: EngineUse) -> tuple[tuple[str, str], ...]:
    """The parameters pdtrt's Python engine model reads (docs/repo.md, the runtime contract)."""
    kv, limits = dep.spec.kv_transfer, engine.limits
    return (
        (Param.ROLE, engine.role),
        (Param.ENGINE_DIR, str(engine.engine_dir)),
        (Param.MAX_BATCH_SIZE, str(limits.max_batch_size)),
        (Param.MAX_NUM_TOKENS, str(limits.max_num_tokens)),
        (Param.MAX_INPUT_LEN, str(limits.max_input_len)),
        (Param.MAX_SEQ_LEN, str(limits.max_seq_len)),
        (Param.TOKENS_PER_BLOCK, str(limits.tokens_per_block)),
        (Param.ENABLE_BLOCK_REUSE, param_flag(dep.spec.pool(engine.phase).engine
                                              .enable_block_reuse)),
        (Param.SAMPLER_TYPE, str(dep.spec.pool(engine.phase).engine.sampler)),
        (Param.KV_TRANSFER_TIMEOUT_S, param_number(kv.timeout_s)),
        (Param.UCX_TLS, ",".join(kv.transports)),
        # the decode's response cadence, which the aggregated model takes too (as trtllm-1.2's
        # options files: pdtrt/targets/llm_options.py); a context-only request makes one token
        *(() if engine.role is Role.PREFILL else
          ((Param.STREAM_INTERVAL, str(dep.spec.decode.engine.stream_interval)),)),
    )


class ReferenceTarget(TargetSupport):
    target = Target.REFERENCE
    needs_gpu = False
    supports_remote_pools = True
    supports_endpoint_pools = True
    # the same as trtllm-build's, so a spec's limits mean the same on every target
    engine_defaults = TRTLLM_BUILD_DEFAULTS
    container_image = None
    build_switches = ()  # TensorRT-LLM's plugin switches mean nothing to the CPU engine
    engine_io = REFERENCE_ENGINE_IO
    engine_backend = TritonBackend.PYTHON
    engine_error_output = ERROR_OUTPUT

    # --- spec ------------------------------------------------------------------------------
    def spec_issues(self, spec: DeploymentSpec) -> Iterator[SpecIssue]:
        for phase in Phase:
            pool = spec.pool(phase)
            for field in ("tp", "pp"):
                value = getattr(pool, field)
                if value != 1:
                    yield SpecIssue(
                        path=f"{phase}.{field}",
                        message=f"the reference engine runs one process per instance: "
                        f"{field} must be 1, got {value}",
                    )
            if spec.weights(phase) is not WeightQuant.NONE:
                yield SpecIssue(path="model.weights",
                                message="the reference engine does not quantise weights: "
                                f"{phase} weights must be none, got {spec.weights(phase)}")
        if spec.model.path is not None and spec.model.seed:
            yield SpecIssue(path="model.seed",
                            message="seed only applies to the generated checkpoint; remove it "
                            "when model.path points at a checkpoint")

    # --- build -----------------------------------------------------------------------------
    def build_source(self, ctx: BuildContext) -> BuildSource:
        src = checkpoint_source(ctx.dep)
        tokenizer = BuildStep(
            name="tokenizer", kind=StepKind.REFERENCE_TOKENIZER, phase=None, argv=(),
            inputs=(), output_dir=ctx.layout.tokenizer_dir,
            log_file=ctx.logs_dir / "tokenizer.log", gpu=None,
            what=f"byte-level BPE, vocab {ctx.dep.model.vocab_size}, trained on "
            "pdtrt/data/corpus/reference.txt (linked instead when model.path has "
            "tokenizer.json)" if src.kind is SourceKind.GENERATED else
            f"the model's own tokenizer and chat template: {src.describe()}")
        return BuildSource(model_dir=None, notes=(), steps=(tokenizer,))

    def plan_phase(self, ctx: BuildContext, phase: Phase, settings: EngineSettings) -> PhaseBuild:
        model = ctx.dep.spec.model
        src = checkpoint_source(ctx.dep)
        checkpoint = BuildStep(
            name=f"{phase}-checkpoint", kind=StepKind.REFERENCE_CHECKPOINT, phase=phase,
            argv=(), inputs=(), output_dir=ctx.layout.phase_dir(phase),
            log_file=ctx.logs_dir / f"{phase}.log", gpu=None, what=(
                f"LlamaForCausalLM({model.name} config) seeded with {model.seed}, "
                f"{model.dtype}, save_pretrained(safe_serialization=True)"
                if src.kind is SourceKind.GENERATED else src.describe()))
        return PhaseBuild(settings=settings, notes=(), steps=(checkpoint,))

    def prepare_host(self, plan: BuildPlan, *, force: bool, nvml: Any,
                     toolchain: Toolchain | None) -> BuildHost:
        return BuildHost(detection=None, versions=reference_versions())

    def run_in_process(self, step: BuildStep, dep: Deployment, *,
                       progress: Callable[[str], None] | None = None) -> None:
        step.log_file.parent.mkdir(parents=True, exist_ok=True)
        step.log_file.write_text("", encoding="utf-8")  # appended to by downloads, conversions
        try:
            if step.kind is StepKind.REFERENCE_TOKENIZER:
                write_reference_tokenizer(dep, step.output_dir, log=step.log_file,
                                          progress=progress)
                what = "tokenizer"
            else:
                write_reference_checkpoint(dep, step.output_dir, log=step.log_file,
                                           progress=progress)
                what = "checkpoint"
        except ImportError as exc:
            raise BuildError(f"step {step.name} needs {exc.name or 'torch/transformers'}, "
                             "which is not installed",
                             hint="pip install 'pdtrt[reference]'") from None
        with step.log_file.open("a", encoding="utf-8") as log:
            log.write(f"wrote the reference {what} into {step.output_dir}\n")

    def step_inputs(self, step: BuildStep, dep: Deployment) -> dict[str, str]:
        if step.kind is StepKind.REFERENCE_TOKENIZER:
            return tokenizer_inputs(dep)
        if step.kind is StepKind.REFERENCE_CHECKPOINT:
            return checkpoint_inputs(dep)
        return {}

    # --- repository ------------------------------------------------------------------------
    def engine_decoupled(self, spec: DeploymentSpec) -> bool:
        return True  # pdtrt's Python engine model is decoupled whatever serving.streaming says

    def tokenizer_dir(self, dep: Deployment, layout: EngineLayout) -> str:
        return str(layout.tokenizer_dir)  # the one `pdtrt build` writes

    def plan_launch(self, dep: Deployment, engines: Sequence[EngineUse], *,
                    layout: EngineLayout, tokenizer_dir: str) -> LaunchPlan | None:
        return None  # pdtrt's embedded server (pdtrt serve) starts it

    def engine_model(self, dep: Deployment, engine: EngineUse, *,
                     launch: LaunchPlan | None) -> ModelPlan:
        # trtllm-1.2's LLM-API engine model, over pdtrt's CPU reference of the LLM API
        # (pdtrt.llmapi.load_llm_api picks it where tensorrt_llm is not installed)
        return python_model(engine.model, engine.role, batch=engine.limits.max_batch_size,
                            decoupled=self.engine_decoupled(dep.spec), io=self.engine_io,
                            count=engine.instances,
                            params=engine_parameters(dep, engine))

    def launch_files(self, dep: Deployment, launch: LaunchPlan) -> tuple[TemplateFile, ...]:
        return ()
