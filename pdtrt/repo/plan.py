"""What goes into a generated model repository: every model's config, as typed values.

:func:`plan_repo` turns a :class:`Deployment`, a :class:`RepoMode` and the engines root into a
:class:`RepoPlan` -- model names, backends, batch sizes, decoupling, I/O tables, instance groups,
string parameters, ensemble steps, engine directories, and (trtllm-0.21) the launch plan. All
numbers are computed here; :mod:`pdtrt.repo.render` only formats them. Batch sizes: each engine
model uses its phase's ``max_batch_size``; the router and the disaggregated ensemble the larger
of prefill's and decode's; the aggregated ensemble the aggregated model's; preprocessing and
postprocessing the largest of all (an ensemble may not exceed any of its steps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pdtrt.build.manifest import EngineLayout
from pdtrt.engine_io import (
    ENGINE_STEP_MAP,
    ENSEMBLE_IO,
    ERROR_OUTPUT,
    POSTPROCESSING_IO,
    POSTPROCESSING_STEP_MAP,
    PREPROCESSING_IO,
    PREPROCESSING_STEP_MAP,
    ROUTER_IO,
    ModelIO,
    ModelName,
    Param,
    Role,
    StepMap,
)
from pdtrt.enums import Phase, Target
from pdtrt.errors import RepoError
from pdtrt.repo.limits import PhaseLimits, manifest_if_present, resolve_limits
from pdtrt.spec.deployment import Deployment
from pdtrt.targets.repo_table import repo_facts
from pdtrt.targets.trtllm_launch import EnginePlacement, LaunchPlan, plan_launch

__all__ = ["EnsemblePlan", "ModelPlan", "RepoMode", "RepoPlan", "plan_repo", "tokenizer_dir_of"]

SHIM_MODULES = {
    Role.PREFILL: "pdtrt.runtime.engine_model",
    Role.DECODE: "pdtrt.runtime.engine_model",
    Role.AGGREGATED: "pdtrt.runtime.engine_model",
    Role.ROUTER: "pdtrt.runtime.router_model",
    Role.PREPROCESSING: "pdtrt.runtime.preprocessing_model",
    Role.POSTPROCESSING: "pdtrt.runtime.postprocessing_model",
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
class ModelPlan:
    name: ModelName
    role: Role
    backend: str  # "python" | "tensorrtllm"
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
class RepoPlan:
    target: Target
    mode: RepoMode
    models: tuple[ModelPlan, ...]
    ensembles: tuple[EnsemblePlan, ...]
    engine_dirs: dict[ModelName, Path]
    tokenizer_dir: str
    limits: dict[Phase, PhaseLimits]
    launch: LaunchPlan | None
    remote: dict[ModelName, str] = field(default_factory=dict)  # engine model -> HOST:PORT


def _abs(path: Path) -> Path:
    return Path(os.path.abspath(path))


def tokenizer_dir_of(dep: Deployment, layout: EngineLayout) -> str:
    """Reference: the tokenizer pdtrt build writes. trtllm: the HF checkpoint (or hub name)."""
    if dep.spec.target is Target.REFERENCE:
        return str(layout.tokenizer_dir)
    if dep.spec.model.path is None:
        return dep.spec.model.name
    path = _abs(dep.source.parent / dep.spec.model.path)
    return str(path.parent if path.suffix == ".json" else path)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _num(value: float) -> str:
    return f"{value:g}"


def _engine_parameters(dep: Deployment, role: Role, engine_dir: Path,
                       limits: PhaseLimits) -> tuple[tuple[str, str], ...]:
    kv = dep.spec.kv_transfer
    return (
        (Param.ROLE, role),
        (Param.ENGINE_DIR, str(engine_dir)),
        (Param.MAX_BATCH_SIZE, str(limits.max_batch_size)),
        (Param.MAX_NUM_TOKENS, str(limits.max_num_tokens)),
        (Param.MAX_INPUT_LEN, str(limits.max_input_len)),
        (Param.MAX_SEQ_LEN, str(limits.max_seq_len)),
        (Param.TOKENS_PER_BLOCK, str(limits.tokens_per_block)),
        (Param.KV_TRANSFER_TIMEOUT_S, _num(kv.timeout_s)),
        (Param.UCX_TLS, ",".join(kv.transports)),
    )


def _trtllm_parameters(dep: Deployment, phase: Phase, engine_dir: Path, limits: PhaseLimits,
                       launch: LaunchPlan, model: ModelName) -> tuple[tuple[str, str], ...]:
    facts = repo_facts(Target.TRTLLM_0_21)
    ranks = launch.rank_plan(model)
    pool = dep.spec.pool(phase)
    fixed = dict(facts.engine_fixed_parameters)
    first = tuple((k, fixed.pop(k)) for k in ("max_beam_width", "FORCE_CPU_ONLY_INPUT_TENSORS",
                                              "gpt_model_type"))
    return (
        *first,
        ("gpt_model_path", str(engine_dir)),
        ("max_tokens_in_paged_kv_cache", str(limits.kv_tokens)),
        ("kv_cache_free_gpu_mem_fraction", _num(pool.engine.kv_cache_free_gpu_mem_fraction)),
        *fixed.items(),
        ("gpu_device_ids", ranks.gpu_device_ids_param),
        ("participant_ids", ranks.participant_ids_param),
        ("executor_worker_path", str(facts.executor_worker_path)),
    )


def _python_model(name: ModelName, role: Role, *, batch: int, decoupled: bool, io: ModelIO,
                  count: int, params: tuple[tuple[str, str], ...]) -> ModelPlan:
    return ModelPlan(name=name, role=role, backend="python", max_batch_size=batch,
                     decoupled=decoupled, io=io, instance_count=count, parameters=params,
                     dynamic_batching=False, shim_module=SHIM_MODULES[role])


def plan_repo(dep: Deployment, *, mode: RepoMode, engines_root: Path) -> RepoPlan:
    """Everything a repository of ``mode`` for ``dep`` holds; raises :class:`RepoError`."""
    spec = dep.spec
    if mode is RepoMode.DISAGGREGATED and spec.router.aggregated_below_tokens > 0:
        raise RepoError(
            f"router.aggregated_below_tokens is {spec.router.aggregated_below_tokens}, but a "
            "--mode disaggregated repository has no aggregated model to route short prompts to",
            hint="use --mode both, or set router.aggregated_below_tokens to 0")
    facts = repo_facts(spec.target)
    layout = EngineLayout(_abs(engines_root), spec.name)
    phase_dirs = {p: layout.phase_dir(p) for p in Phase}
    limits = {p: resolve_limits(dep, p, manifest_if_present(phase_dirs[p])) for p in Phase}
    # (model, role, phase whose engine and pool it uses)
    engines: list[tuple[ModelName, Role, Phase]] = []
    # Pools with an endpoint are served by another Triton server: no local model here (and
    # only those in a --mode pools repository, the one that other server serves).
    pools = ((ModelName.PREFILL, Role.PREFILL, Phase.PREFILL),
             (ModelName.DECODE, Role.DECODE, Phase.DECODE))
    endpoints = {name: spec.endpoints[phase] for name, _, phase in pools
                 if phase in spec.endpoints}
    remote = endpoints if mode.has_disaggregated else {}
    if mode.has_disaggregated:
        engines += [pool for pool in pools if pool[0] not in remote]
    if mode is RepoMode.POOLS:
        if not endpoints:
            raise RepoError(f"deployment '{spec.name}' has no pool with an endpoint, so there "
                            "is nothing for a --mode pools repository to serve",
                            hint="set prefill.endpoint / decode.endpoint to this server's "
                            "HOST:PORT (docs/examples/reference-remote.yaml), or use --mode both")
        engines += [pool for pool in pools if pool[0] in endpoints]
    if mode.has_aggregated:
        engines.append((ModelName.AGGREGATED, Role.AGGREGATED, Phase.PREFILL))
    engine_dirs = {name: phase_dirs[phase] for name, _, phase in engines}
    tokenizer_dir = tokenizer_dir_of(dep, layout)

    launch = None
    if spec.target is Target.TRTLLM_0_21:
        placements = [EnginePlacement(model=name, gpu=dep.gpus[ph].key, tp=spec.pool(ph).tp,
                                      pp=spec.pool(ph).pp, instances=spec.pool(ph).instances)
                      for name, _, ph in engines]
        mounts = [str(layout.deployment_dir)]
        if spec.model.path is not None:
            mounts.append(tokenizer_dir)
        launch = plan_launch(spec, placements, image=str(facts.container_image), mounts=mounts)

    streaming = spec.serving.streaming
    models: list[ModelPlan] = []
    for name, role, phase in engines:
        lim = limits[phase]
        if spec.target is Target.REFERENCE:
            models.append(_python_model(
                name, role, batch=lim.max_batch_size, decoupled=True, io=facts.engine_io,
                count=spec.pool(phase).instances,
                params=_engine_parameters(dep, role, engine_dirs[name], lim)))
        else:
            assert launch is not None
            models.append(ModelPlan(
                name=name, role=role, backend=facts.engine_backend,
                max_batch_size=lim.max_batch_size, decoupled=streaming, io=facts.engine_io,
                instance_count=spec.pool(phase).instances, dynamic_batching=True,
                parameters=_trtllm_parameters(dep, phase, engine_dirs[name], lim, launch, name),
                shim_module=None))
    engine_batch = {m.name: m.max_batch_size for m in models}
    ensembles: list[EnsemblePlan] = []
    if mode.has_disaggregated:
        batch = max(limits[Phase.PREFILL].max_batch_size, limits[Phase.DECODE].max_batch_size)
        phases = [Phase.PREFILL, Phase.DECODE]
        models.append(_python_model(
            ModelName.ROUTER, Role.ROUTER, batch=batch,
            decoupled=True if spec.target is Target.REFERENCE else streaming, io=ROUTER_IO,
            count=spec.router.instances, params=(
                (Param.ROLE, Role.ROUTER),
                (Param.PREFILL_MODEL, ModelName.PREFILL),
                (Param.DECODE_MODEL, ModelName.DECODE),
                (Param.AGGREGATED_MODEL, ModelName.AGGREGATED if mode.has_aggregated else ""),
                (Param.AGGREGATED_BELOW_TOKENS, str(spec.router.aggregated_below_tokens)),
                (Param.EARLY_FIRST_TOKEN, _flag(spec.router.early_first_token)),
                (Param.PREFILL_URL, remote.get(ModelName.PREFILL, "")),
                (Param.DECODE_URL, remote.get(ModelName.DECODE, "")),
                (Param.ERROR_OUTPUT,
                 ERROR_OUTPUT if spec.target is Target.REFERENCE else ""),
                (Param.MAX_INPUT_LEN, str(min(limits[p].max_input_len for p in phases))),
                (Param.MAX_SEQ_LEN, str(min(limits[p].max_seq_len for p in phases))),
            )))
        ensembles.append(EnsemblePlan(name=ModelName.ENSEMBLE, max_batch_size=batch,
                                      io=ENSEMBLE_IO, steps=_steps(ModelName.ROUTER)))
    if mode.has_aggregated:
        ensembles.append(EnsemblePlan(
            name=ModelName.ENSEMBLE_AGGREGATED, max_batch_size=engine_batch[ModelName.AGGREGATED],
            io=ENSEMBLE_IO, steps=_steps(ModelName.AGGREGATED)))
    if ensembles:
        front = max(e.max_batch_size for e in ensembles)
        tok = ((Param.TOKENIZER_DIR, tokenizer_dir),)
        models.insert(0, _python_model(ModelName.PREPROCESSING, Role.PREPROCESSING,
                                       batch=front, decoupled=False, io=PREPROCESSING_IO,
                                       count=1, params=((Param.ROLE, Role.PREPROCESSING), *tok)))
        models.append(_python_model(ModelName.POSTPROCESSING, Role.POSTPROCESSING, batch=front,
                                    decoupled=False, io=POSTPROCESSING_IO, count=1,
                                    params=((Param.ROLE, Role.POSTPROCESSING), *tok)))
    return RepoPlan(target=spec.target, mode=mode, models=tuple(models),
                    ensembles=tuple(ensembles), engine_dirs=engine_dirs,
                    tokenizer_dir=tokenizer_dir, limits=limits, launch=launch, remote=remote)


def _steps(middle: ModelName) -> tuple[tuple[ModelName, StepMap], ...]:
    return ((ModelName.PREPROCESSING, PREPROCESSING_STEP_MAP), (middle, ENGINE_STEP_MAP),
            (ModelName.POSTPROCESSING, POSTPROCESSING_STEP_MAP))
