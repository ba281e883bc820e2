"""Target ``trtllm-1.2``: pdtrt's LLM-API engine model in the NGC 26.07 container.

From TensorRT-LLM 1.0 NVIDIA's Triton C++ backend forces the MPI KV transport, and its
``llmapi`` Triton model has no prefill/decode split; 26.07 (Triton 2.71, TensorRT-LLM 1.2.1) is
the last Triton container listed with TensorRT-LLM. So here the engine models are pdtrt's own
Python engine model (decoupled, the I/O of the reference target) driving the LLM API's PyTorch
flow -- ``tensorrt_llm.LLM(model=<llm_model>, **<phase options>)`` -- with UCX cache transceivers.

Build: no engines. Per phase an in-process step writes the LLM-API options file
(:mod:`pdtrt.targets.llm_options`, checked against the pinned ``LlmArgs`` facts of
:mod:`pdtrt.targets.llm_args`); when the phase asks FP8 weights, NVIDIA ModelOpt's ``hf_ptq.py``
first exports an FP8 Hugging Face checkpoint, run in the container on the phase's GPU type
like trtllm-0.21's steps (argv checked by the version's schema, ``trtllm-1.2.yaml``). Without
``model.path``, a step both phases share resolves the model's Hub snapshot into this host's
Hugging Face cache first (token check, ``HF_HUB_OFFLINE``, renamed repositories:
:mod:`pdtrt.targets.hf_snapshot`); the repository then loads that snapshot, which ``launch.sh``
mounts, offline.
Launch: one Triton server per host (:mod:`pdtrt.targets.server_launch`); a pool on another GPU
type is another server (``<pool>.endpoint``, ``--mode pools``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import LaunchPlan, env_lines
from pdtrt.blueprint.limits import TRTLLM_BUILD_DEFAULTS
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.settings import EngineSettings
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.steps import BuildPlan, BuildStep, StepKind
from pdtrt.blueprint.triton_models import (
    EngineUse,
    ModelPlan,
    TemplateFile,
    param_number,
    python_model,
)
from pdtrt.engine_io import (
    ERROR_OUTPUT,
    KV_TRANSFER_DEADLINE_MARGIN_S,
    REFERENCE_ENGINE_IO,
    Param,
    Role,
)
from pdtrt.enums import KVDType, Phase, Target, TritonBackend, WeightQuant
from pdtrt.envvars import HF_HUB_OFFLINE, PDTRT_TRTLLM_EXAMPLES
from pdtrt.errors import BuildError, SpecIssue, ToolchainError
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.gpu_detect import detect_gpus
from pdtrt.targets import hf_snapshot
from pdtrt.targets import toolchain as toolchains
from pdtrt.targets.base import BuildContext, BuildHost, BuildSource, PhaseBuild
from pdtrt.targets.container import ContainerTarget
from pdtrt.targets.image import dockerfile_values, image_tag, load_image_recipe
from pdtrt.targets.llm_args import LlmArgsFacts, load_llm_args
from pdtrt.targets.llm_memory import memory_notes, plan_memory
from pdtrt.targets.llm_options import (
    OPTIONS_FILE,
    LlmOption,
    aggregated_options,
    aggregated_settings,
    check_options,
    options_mapping,
    options_yaml,
    phase_options,
    with_options,
)
from pdtrt.targets.schema import Tool
from pdtrt.targets.server_launch import plan_server_launch, server_script_values, sharing_issues
from pdtrt.targets.toolchain import Toolchain, check_toolchain
from pdtrt.targets.trtllm_build import check_gpus, check_model_dir, hf_model_ref, model_dir
from pdtrt.targets.trtllm_launch import engine_placements, launch_mounts
from pdtrt.yamlio import write_atomic

__all__ = ["Trtllm12Target", "fp8_checkpoint_dir", "weights_dir"]

_WEIGHTS = (WeightQuant.NONE, WeightQuant.FP8)


def fp8_checkpoint_dir(layout: EngineLayout, phase: Phase) -> Path:
    """Where the phase's FP8 Hugging Face checkpoint goes (the ``llm_model`` it loads)."""
    return layout.deployment_dir / "checkpoints" / str(phase)


def weights_dir(layout: EngineLayout) -> Path:
    """Where ``pdtrt build`` records the model's resolved Hub snapshot (``weights.json``)."""
    return layout.deployment_dir / "weights"


def _recorded(dep: Deployment, layout: EngineLayout) -> hf_snapshot.WeightsRecord | None:
    """The snapshot the build recorded, when the spec loads the model by its Hub name."""
    if dep.spec.model.path is not None:
        return None
    return hf_snapshot.recorded_snapshot(dep.spec.model.name, weights_dir(layout))


def _model_ref(dep: Deployment, layout: EngineLayout) -> str:
    """What the engine models and the tokenizer load: ``model.path``'s directory, else the
    snapshot ``pdtrt build`` recorded, else the Hub's current name for the model (downloaded
    at load: the repository was generated before the build, or on another host)."""
    if dep.spec.model.path is not None:
        return hf_model_ref(dep)
    record = _recorded(dep, layout)
    return str(record.snapshot) if record else hf_snapshot.hub_repo_id(dep.spec.model.name)


class Trtllm12Target(ContainerTarget):
    target = Target.TRTLLM_1_2
    needs_gpu = True
    supports_remote_pools = True  # one Triton server per pool's host (--mode pools)
    engine_defaults = TRTLLM_BUILD_DEFAULTS  # = TorchLlmArgs' max_batch_size / max_num_tokens
    build_switches = ()  # trtllm-build's plugin switches mean nothing to the PyTorch flow
    engine_io = REFERENCE_ENGINE_IO
    engine_backend = TritonBackend.PYTHON
    engine_error_output = ERROR_OUTPUT

    @property
    def llm_args(self) -> LlmArgsFacts:
        return load_llm_args(self.target)

    # --- spec ------------------------------------------------------------------------------
    def spec_issues(self, spec: DeploymentSpec) -> Iterator[SpecIssue]:
        for phase in Phase:
            kv, weights = spec.kv_cache_dtype(phase), spec.weights(phase)
            if kv not in (KVDType.FP8, KVDType(str(spec.model.dtype))):
                yield SpecIssue(path="model.kv_cache_dtype",
                                message=f"{self.target} keeps the KV cache in the model dtype "
                                f"({spec.model.dtype}) or fp8, not {kv}")
            if weights not in _WEIGHTS:
                yield SpecIssue(path="model.weights",
                                message=f"{self.target} builds {phase} weights none or fp8 "
                                f"(ModelOpt FP8), not {weights}")
        yield from sharing_issues(spec)

    # --- build -----------------------------------------------------------------------------
    def build_source(self, ctx: BuildContext) -> BuildSource:
        """Without ``model.path``: first the shared step that resolves the Hub snapshot."""
        source = super().build_source(ctx)
        name = ctx.dep.spec.model.name
        if ctx.dep.spec.model.path is not None:
            return source
        repo_id = hf_snapshot.hub_repo_id(name)
        renamed = f" (the Hub's current name for {name})" if repo_id != name else ""
        fp8 = any(ctx.dep.spec.weights(p) is WeightQuant.FP8 for p in Phase)
        out = weights_dir(ctx.layout)
        step = BuildStep(
            name=StepKind.HF_SNAPSHOT, kind=StepKind.HF_SNAPSHOT, phase=None, argv=(),
            inputs=(), output_dir=out, log_file=ctx.logs_dir / f"{StepKind.HF_SNAPSHOT}.log",
            gpu=None,
            what=f"resolves {repo_id}{renamed} in this host's Hugging Face cache: a token "
            "check for a gated repository, then the download (without original/) -- with "
            "HF_HUB_OFFLINE=1 a look-up only; records the checked snapshot in "
            f"{out / hf_snapshot.RECORD_FILE}, which the repository loads")
        notes = source.notes if fp8 else ()  # the FP8 step still reads model_dir
        return BuildSource(model_dir=source.model_dir, notes=notes, steps=(step,))

    def plan_phase(self, ctx: BuildContext, phase: Phase, settings: EngineSettings) -> PhaseBuild:
        dep = ctx.dep
        memory = plan_memory(dep, phase, settings)
        options = phase_options(dep, phase, settings, memory)
        steps: list[BuildStep] = []
        notes: list[str] = []
        if dep.spec.weights(phase) is WeightQuant.FP8:
            steps.append(self._quantize_step(ctx, phase))
        elif dep.spec.kv_cache_dtype(phase) is KVDType.FP8:
            notes.append(f"{phase}: FP8 KV cache on {dep.spec.model.dtype} weights: no "
                         "calibrated KV scales (FP8 weights export them with ModelOpt)")
        if phase is Phase.PREFILL and dep.spec.pool(phase).engine.enable_block_reuse:
            notes.append(
                "prefill: block reuse on a context server of TensorRT-LLM 1.2: a block evicted "
                "from the reuse tree before its asynchronous send ends leaves the decode waiting "
                "for the KV forever (TensorRT-LLM #12542, open for 1.2); the router gives up on "
                "such a decode after kv_transfer.timeout_s + "
                f"{param_number(KV_TRANSFER_DEADLINE_MARGIN_S)} s and stops its request")
        notes += memory_notes(memory)
        if phase is Phase.PREFILL:  # the phase's own options stay its last step
            steps.append(self._aggregated_step(ctx, settings))
        steps.append(self._options_step(ctx, options, prefix=str(phase), phase=phase,
                                        out=ctx.layout.phase_dir(phase),
                                        serves=f"phase {phase}", what="the LLM-API options above"))
        return PhaseBuild(settings=with_options(settings, options), notes=tuple(notes),
                          steps=tuple(steps))

    def _aggregated_step(self, ctx: BuildContext, prefill: EngineSettings) -> BuildStep:
        """The aggregated baseline's options (:func:`aggregated_options`), built with the
        prefill phase whose engine and GPU it serves."""
        dep = ctx.dep
        settings = aggregated_settings(prefill, ctx.chosen[Phase.DECODE])
        options = aggregated_options(dep, settings, plan_memory(dep, Phase.PREFILL, settings,
                                                                aggregated=True))
        return self._options_step(
            ctx, options, prefix="aggregated", phase=Phase.PREFILL,
            out=ctx.layout.aggregated_dir, serves="the aggregated baseline",
            what="the aggregated baseline's options (the prefill's engine with the decode's "
            f"max_batch_size {settings['max_batch_size']}, overlap scheduler and CUDA graphs "
            "on, no cache transceiver)")

    def _options_step(self, ctx: BuildContext, options: tuple[LlmOption, ...], *, prefix: str,
                      phase: Phase, out: Path, serves: str, what: str) -> BuildStep:
        """The in-process step writing ``options`` to ``out``'s options file, checked
        against the pinned LlmArgs first (:class:`BuildRejected` naming the file)."""
        file = out / OPTIONS_FILE
        check_options(self.llm_args, options_mapping(options), file=file)
        return BuildStep(
            name=f"{prefix}-{StepKind.LLM_OPTIONS}", kind=StepKind.LLM_OPTIONS, phase=phase,
            argv=(), inputs=(), output_dir=out,
            log_file=ctx.logs_dir / f"{prefix}-{StepKind.LLM_OPTIONS}.log", gpu=None,
            what=f"writes {file}: {what}, checked against {self.llm_args.cite()}",
            content=options_yaml(options, serves=serves, deployment=ctx.dep.spec.name))

    def _quantize_step(self, ctx: BuildContext, phase: Phase) -> BuildStep:
        """ModelOpt FP8 post-training quantization, exported as a Hugging Face checkpoint."""
        dep, schema = ctx.dep, self.schema
        source = model_dir(dep)[0]
        out = fp8_checkpoint_dir(ctx.layout, phase)
        kv = dep.spec.kv_cache_dtype(phase)
        examples = (ctx.examples_dir or os.environ.get(PDTRT_TRTLLM_EXAMPLES)
                    or schema.examples_dir)
        args = schema.render(Tool.HF_PTQ, {
            "pyt_ckpt_path": str(source), "export_path": str(out), "qformat": "fp8",
            "kv_cache_qformat": "fp8" if kv is KVDType.FP8 else "none", "calib_size": "512",
            "batch_size": 1})
        return BuildStep(
            name=f"{phase}-{StepKind.HF_PTQ}", kind=StepKind.HF_PTQ, phase=phase,
            argv=(schema.python, f"{examples}/{schema.quantize_script}", *args),
            inputs=(source,), output_dir=out,
            log_file=ctx.logs_dir / f"{phase}-{StepKind.HF_PTQ}.log", gpu=dep.gpus[phase])

    def prepare_host(self, plan: BuildPlan, *, force: bool, nvml: Any,
                     toolchain: Toolchain | None) -> BuildHost:
        """Options files need nothing of this machine; an FP8 step needs the phase's GPU
        type, TensorRT-LLM 1.2.1 with its ModelOpt, the script and the checkpoint."""
        if all(s.in_process for s in plan.steps):
            return BuildHost(detection=None, versions=self._versions())
        detection = detect_gpus(load_catalog(), nvml)
        check_gpus(plan, detection, force=force)
        toolchain = toolchain or check_toolchain(plan)
        self._check_modelopt(toolchain)
        check_model_dir(plan.model_dir)
        return BuildHost(detection=detection,
                         versions={**toolchain.versions, **self._versions()})

    def _versions(self) -> dict[str, str | None]:
        version = toolchains.dist_version
        return {"tensorrt_llm": version("tensorrt_llm") or version("tensorrt-llm"),
                "nvidia_modelopt": version("nvidia-modelopt")}

    def _check_modelopt(self, toolchain: Toolchain) -> None:
        want = self.schema.versions["nvidia_modelopt"]
        have = toolchains.dist_version("nvidia-modelopt")
        if have is None or have.split(".")[:2] != want.split(".")[:2]:
            raise ToolchainError(
                f"nvidia-modelopt here is {have or 'not installed'}, TensorRT-LLM "
                f"{toolchain.versions.get('tensorrt_llm')} pins ~={want}",
                hint=f"run inside {self.container_image} (its TensorRT-LLM brings the pinned "
                "ModelOpt); see docs/build.md")

    def run_in_process(self, step: BuildStep, dep: Deployment, *,
                       progress: Callable[[str], None] | None = None) -> None:
        """Resolve the Hub snapshot, or write the options file the plan computed and checked
        (``step.content``)."""
        if step.kind is StepKind.HF_SNAPSHOT:
            line = hf_snapshot.build_weights(dep.spec.model.name, step.output_dir, os.environ,
                                             progress=progress or (lambda _line: None))
            step.log_file.parent.mkdir(parents=True, exist_ok=True)
            step.log_file.write_text(line + "\n", encoding="utf-8")
            return
        if step.kind is not StepKind.LLM_OPTIONS or not step.content:
            raise BuildError(f"BUG in pdtrt: {self.target} has no in-process step {step.name}")
        file = step.output_dir / OPTIONS_FILE
        write_atomic(file, step.content)
        step.log_file.parent.mkdir(parents=True, exist_ok=True)
        step.log_file.write_text(f"wrote {file}\n", encoding="utf-8")

    def step_inputs(self, step: BuildStep, dep: Deployment) -> dict[str, str]:
        if step.kind is StepKind.HF_SNAPSHOT:
            return hf_snapshot.weights_inputs(dep.spec.model.name, step.output_dir, os.environ)
        if step.kind is not StepKind.LLM_OPTIONS:
            return {}  # the argv and the input directory say everything
        return {"options": hashlib.sha256(step.content.encode()).hexdigest()}

    # --- repository ------------------------------------------------------------------------
    def engine_decoupled(self, spec: DeploymentSpec) -> bool:
        return True  # pdtrt's Python engine model is decoupled whatever serving.streaming says

    def tokenizer_dir(self, dep: Deployment, layout: EngineLayout) -> str:
        """The HF checkpoint's directory (``model.path``), else the snapshot ``pdtrt build``
        recorded, else the model's current Hub name."""
        return _model_ref(dep, layout)

    def plan_launch(self, dep: Deployment, engines: Sequence[EngineUse], *,
                    layout: EngineLayout, tokenizer_dir: str) -> LaunchPlan:
        """One server; with a recorded snapshot its cache folder is mounted (the snapshot's
        files link into its ``blobs/``) and the container is offline: nothing downloads."""
        record = _recorded(dep, layout)
        mounts = launch_mounts(dep, layout, tokenizer_dir)
        mounts += [str(record.repo_folder)] if record else []
        launch = plan_server_launch(dep.spec, engine_placements(dep, engines),
                                    image=self.container_image, mounts=mounts)
        if record is None:
            return launch
        return dataclasses.replace(launch, env=(*launch.env, (HF_HUB_OFFLINE, "1")))

    def engine_model(self, dep: Deployment, engine: EngineUse, *,
                     launch: LaunchPlan | None) -> ModelPlan:
        assert launch is not None, "plan_launch gives every trtllm-1.2 repository a launch plan"
        layout_dir = engine.engine_dir  # <root>/<name>/<phase>
        fp8 = dep.spec.weights(engine.phase) is WeightQuant.FP8
        layout = EngineLayout(layout_dir.parent.parent, dep.spec.name)
        llm_model = (str(fp8_checkpoint_dir(layout, engine.phase)) if fp8
                     else _model_ref(dep, layout))
        options_dir = layout.aggregated_dir if engine.role is Role.AGGREGATED else layout_dir
        params = (
            (Param.ROLE, engine.role),
            (Param.ENGINE_DIR, str(layout_dir)),  # pdtrt-engine.json (and the phase's options)
            (Param.LLM_MODEL, llm_model),
            (Param.LLM_OPTIONS, str(options_dir / OPTIONS_FILE)),
            (Param.GPU_DEVICE_IDS, launch.rank_plan(engine.model).gpu_device_ids_param),
        )
        return python_model(engine.model, engine.role, batch=engine.limits.max_batch_size,
                            decoupled=True, io=self.engine_io,
                            count=engine.instances, params=params)

    def launch_files(self, dep: Deployment, launch: LaunchPlan) -> tuple[TemplateFile, ...]:
        """``pdtrt.env``, the serving image's ``Dockerfile`` (the target's image plus what
        pdtrt needs in it, :mod:`pdtrt.targets.image`) and ``launch.sh``, which builds that
        image once (named by its recipe's content) and runs ``pdtrt serve`` in it."""
        recipe = dockerfile_values(load_image_recipe(self.target), base=launch.image)
        image = image_tag(json.dumps(recipe, sort_keys=True), target=self.target)
        return (
            TemplateFile(path="pdtrt.env", template="pdtrt.env.j2",
                         values={"name": dep.spec.name, "lines": env_lines(launch),
                                 "processes": "the Triton server"}),
            TemplateFile(path="Dockerfile", template="Dockerfile.j2", values=recipe),
            TemplateFile(path="launch.sh", template="launch_server.sh.j2", executable=True,
                         values=server_script_values(dep, launch, target=str(self.target),
                                                     image=image)),
        )

