"""Target ``trtllm-0.21``: NVIDIA's ``tensorrtllm`` C++ backend in the NGC 25.08 container.

Engines are built per phase by ``convert_checkpoint.py``/``quantize.py`` + ``trtllm-build``
(:mod:`pdtrt.targets.trtllm_build`) after TensorRT-LLM's own build rules
(:mod:`pdtrt.targets.trtllm_rules`), every flag checked by the version's schema
(``pdtrt/data/targets/trtllm-0.21.yaml``, :mod:`pdtrt.targets.schema`), on the phase's GPU type
with the exact toolchain (:mod:`pdtrt.targets.toolchain`). The engine model is NVIDIA's
``tensorrt_llm`` model in orchestrator mode, one MPI world for the whole repository
(:mod:`pdtrt.targets.trtllm_launch`), started by the generated ``launch.sh`` with ``pdtrt.env``.

The fixed ``tensorrt_llm`` parameters below are the values pdtrt chooses for TensorRT-LLM 0.21's
Triton backend; every parameter the backend requires is written (its contract, with the source
line of each read: :mod:`pdtrt.targets.trtllm_backend`), and ``repo validate`` checks any
``tensorrtllm`` config against the same contract.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import LaunchPlan, env_lines
from pdtrt.blueprint.limits import TRTLLM_BUILD_DEFAULTS
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.settings import SWITCHES, EngineSettings
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.steps import BuildPlan, BuildStep
from pdtrt.blueprint.triton_models import EngineUse, ModelPlan, TemplateFile, param_number
from pdtrt.ensemble import GPT_MODEL_PATH, TRTLLM_0_21_ENGINE_IO
from pdtrt.enums import KVDType, Phase, Sampler, Target, TritonBackend
from pdtrt.envvars import PDTRT_TRTLLM_EXAMPLES
from pdtrt.errors import BuildError, SpecIssue
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.gpu_detect import detect_gpus
from pdtrt.targets.base import BuildContext, BuildHost, PhaseBuild
from pdtrt.targets.container import ContainerTarget
from pdtrt.targets.toolchain import Toolchain, check_toolchain
from pdtrt.targets.trtllm_backend import load_backend_contract
from pdtrt.targets.trtllm_build import (
    check_gpus,
    check_model_dir,
    engine_steps,
    hf_model_ref,
    model_dir,
)
from pdtrt.targets.trtllm_launch import (
    engine_placements,
    launch_mounts,
    launch_script_values,
    plan_launch,
)
from pdtrt.targets.trtllm_rules import apply_rules

__all__ = ["ENGINE_FIXED_PARAMETERS", "UNSET_PARAMETERS", "Trtllm021Target"]


ENGINE_FIXED_PARAMETERS = (
    ("max_beam_width", "1"),  # disaggregation needs beam width 1
    ("FORCE_CPU_ONLY_INPUT_TENSORS", "no"),
    ("gpt_model_type", "inflight_fused_batching"),  # disaggregation needs in-flight batching
    ("batch_scheduler_policy", "guaranteed_no_evict"),
    # Explicit, because the backend defaults it to true when unset, and a KV block evicted from
    # the reuse tree before its asynchronous send finished hangs the transfer (TRT-LLM #12542).
    ("enable_kv_cache_reuse", "false"),
    ("enable_chunked_context", "false"),
    ("exclude_input_in_output", "true"),
    ("normalize_log_probs", "true"),
    ("cancellation_check_period_ms", "100"),
    ("stats_check_period_ms", "100"),
    ("request_stats_max_iterations", "0"),
    # Unset, the orchestrator busy-polls its workers (tensorrtllm_backend #653: high CPU).
    ("recv_poll_period_ms", "1"),
)
# Read by the backend without a default: absent, the model does not load. Empty means unset
# (no guided decoding, which is also what the C++ path would need tokenizer_dir for).
UNSET_PARAMETERS = (
    ("tokenizer_dir", ""),
    ("xgrammar_tokenizer_info_path", ""),
    ("guided_decoding_backend", ""),
)
# rendered before the per-deployment parameters, as in NVIDIA's template
_LEADING_FIXED = ("max_beam_width", "FORCE_CPU_ONLY_INPUT_TENSORS", "gpt_model_type")
EXECUTOR_WORKER_PATH = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"


class Trtllm021Target(ContainerTarget):
    target = Target.TRTLLM_0_21
    needs_gpu = True
    supports_remote_pools = False
    engine_defaults = TRTLLM_BUILD_DEFAULTS
    build_switches = SWITCHES
    engine_io = TRTLLM_0_21_ENGINE_IO
    engine_backend = TritonBackend.TENSORRTLLM
    engine_error_output = ""  # NVIDIA's model has no in-band error output

    # --- spec ------------------------------------------------------------------------------
    def spec_issues(self, spec: DeploymentSpec) -> Iterator[SpecIssue]:
        for phase in Phase:
            if spec.kv_cache_dtype(phase) is KVDType.FP32:
                yield SpecIssue(path="model.kv_cache_dtype",
                                message=f"{self.target} has no fp32 KV cache; use bf16, fp16, "
                                "fp8 or int8")
            if spec.pool(phase).engine.sampler is not Sampler.TRTLLM:
                # TorchSampler belongs to the LLM API's PyTorch flow; NVIDIA's C++ backend
                # runs TensorRT engines, whose executor always samples with the C++ decoder
                yield SpecIssue(path=f"{phase}.engine.sampler",
                                message=f"{self.target}'s C++ backend always samples with the "
                                f"C++ decoder (TRTLLMSampler), not {Sampler.TORCH}; remove "
                                "the setting or use target trtllm-1.2")
        if spec.decode.engine.stream_interval != 1:
            # LlmArgs' stream_interval belongs to the LLM API's PyTorch executor; NVIDIA's C++
            # backend config (tensorrtllm_backend's config.pbtxt) has no such parameter
            yield SpecIssue(path="decode.engine.stream_interval",
                            message=f"{self.target}'s C++ backend answers every token; "
                            "stream_interval is the LLM API's (target trtllm-1.2): remove the "
                            "setting")
        if spec.serving.share_gpus:
            yield SpecIssue(path="serving.share_gpus",
                            message=f"{self.target}'s MPI world gives every engine rank GPUs of "
                            "its own; sharing them needs target trtllm-1.2")

    # --- build -----------------------------------------------------------------------------
    def plan_phase(self, ctx: BuildContext, phase: Phase, settings: EngineSettings) -> PhaseBuild:
        dep, schema = ctx.dep, self.schema
        outcome = apply_rules(settings, model=dep.model, gpu=dep.gpus[phase],
                              weights=dep.spec.weights(phase),
                              kv_dtype=dep.spec.kv_cache_dtype(phase), rules=schema.rules)
        examples = (ctx.examples_dir or os.environ.get(PDTRT_TRTLLM_EXAMPLES)
                    or schema.examples_dir)
        steps = engine_steps(schema, ctx, phase, outcome.settings, examples=examples,
                             checkpoint=model_dir(dep)[0])
        return PhaseBuild(settings=outcome.settings, notes=outcome.notes, steps=steps)

    def prepare_host(self, plan: BuildPlan, *, force: bool, nvml: Any,
                     toolchain: Toolchain | None) -> BuildHost:
        detection = detect_gpus(load_catalog(), nvml)
        check_gpus(plan, detection, force=force)
        toolchain = toolchain or check_toolchain(plan)
        check_model_dir(plan.model_dir)
        return BuildHost(detection=detection, versions=dict(toolchain.versions))

    def run_in_process(self, step: BuildStep, dep: Deployment, *,
                       progress: Callable[[str], None] | None = None) -> None:
        raise BuildError(f"BUG in pdtrt: step {step.name} has no command, and {self.target} "
                         "has no in-process steps")

    def step_inputs(self, step: BuildStep, dep: Deployment) -> dict[str, str]:
        return {}  # the argv and the input directories say everything

    # --- repository ------------------------------------------------------------------------
    def engine_decoupled(self, spec: DeploymentSpec) -> bool:
        return spec.serving.streaming

    def tokenizer_dir(self, dep: Deployment, layout: EngineLayout) -> str:
        """The HF checkpoint's directory (``model.path``), else the model's Hub name."""
        return hf_model_ref(dep)

    def plan_launch(self, dep: Deployment, engines: Sequence[EngineUse], *,
                    layout: EngineLayout, tokenizer_dir: str) -> LaunchPlan:
        engines_dir = str(layout.deployment_dir)
        return plan_launch(dep.spec, engine_placements(dep, engines), image=self.container_image,
                           mounts=launch_mounts(dep, layout, tokenizer_dir),
                           worker_mounts=[engines_dir])

    def engine_model(self, dep: Deployment, engine: EngineUse, *,
                     launch: LaunchPlan | None) -> ModelPlan:
        assert launch is not None, "plan_launch gives every trtllm-0.21 repository a launch plan"
        pool = dep.spec.pool(engine.phase)
        ranks = launch.rank_plan(engine.model)
        fixed = dict(ENGINE_FIXED_PARAMETERS)
        leading = tuple((k, fixed.pop(k)) for k in _LEADING_FIXED)
        parameters = (
            *leading,
            (GPT_MODEL_PATH, str(engine.engine_dir)),
            ("max_tokens_in_paged_kv_cache", str(engine.limits.kv_tokens)),
            ("kv_cache_free_gpu_mem_fraction",
             param_number(pool.engine.kv_cache_free_gpu_mem_fraction)),
            *fixed.items(),
            ("gpu_device_ids", ranks.gpu_device_ids_param),
            ("participant_ids", ranks.participant_ids_param),
            ("executor_worker_path", EXECUTOR_WORKER_PATH),
            *UNSET_PARAMETERS,
        )
        return ModelPlan(
            name=engine.model, role=engine.role, backend=self.engine_backend,
            max_batch_size=engine.limits.max_batch_size,
            decoupled=self.engine_decoupled(dep.spec), io=self.engine_io,
            instance_count=pool.instances, parameters=parameters, dynamic_batching=True,
            shim_module=None)

    def launch_files(self, dep: Deployment, launch: LaunchPlan) -> tuple[TemplateFile, ...]:
        return (
            TemplateFile(path="pdtrt.env", template="pdtrt.env.j2",
                         values={"name": dep.spec.name, "lines": env_lines(launch),
                                 "processes": "every MPI rank"}),
            TemplateFile(path="launch.sh", template="launch.sh.j2", executable=True,
                         values=launch_script_values(dep, launch, target=str(self.target))),
        )

    def engine_config_problems(self, model: str, parameters: Mapping[str, str], *,
                               instance_count: int) -> list[str]:
        return load_backend_contract().config_problems(model, parameters,
                                                       instance_count=instance_count)
