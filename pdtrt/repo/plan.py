"""What goes into a generated model repository: every model's config, as typed values.

:func:`plan_repo` turns a :class:`Deployment`, a :class:`RepoMode` and the engines root into
a :class:`RepoPlan` (:mod:`pdtrt.blueprint.triton_models`) in named steps: which engine models
the mode asks for and which pools live in other servers; each phase's limits
(:mod:`pdtrt.blueprint.limits`); what the target makes of them -- the engine models' backend,
I/O and parameters, the tokenizer directory, the launch plan and its files
(:mod:`pdtrt.targets`); then the router, the ensembles,
pre/postprocessing and the ``health`` readiness marker, which are the same on every target.
Each pool is a list of endpoints (``<pool>.endpoints``): every local one is an engine model
of this repository (``decode``, ``decode_b``, ...), every remote one a model of another server
that only the router's parameters name. All numbers are computed here or by
the target; :mod:`pdtrt.repo.render` only formats them. Batch sizes: each engine model uses its
phase's ``max_batch_size``; the router and the disaggregated ensemble the larger of prefill's
and decode's; the aggregated ensemble the aggregated model's; preprocessing and postprocessing
the largest of all (an ensemble may not exceed any of its steps).
"""

from __future__ import annotations

import os
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.limits import PhaseLimits, manifest_if_present, resolve_limits
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.triton_models import (
    EngineUse,
    EnsemblePlan,
    ModelPlan,
    RepoMode,
    RepoPlan,
    health_model,
    param_flag,
    param_number,
    python_model,
)
from pdtrt.endpoints import EndpointSpec, format_endpoints
from pdtrt.engine_io import KV_TRANSFER_DEADLINE_MARGIN_S, ROUTER_IO, ModelName, Param, Role
from pdtrt.ensemble import (
    ENGINE_STEP_MAP,
    POSTPROCESSING_IO,
    PREPROCESSING_IO,
    PREPROCESSING_STEP_MAP,
    StepMap,
    engine_input_renames,
    engine_step_map,
    ensemble_io,
    postprocessing_step_map,
)
from pdtrt.enums import Phase, PhaseTransport, Routing, Target
from pdtrt.errors import RepoError
from pdtrt.targets.base import TargetSupport
from pdtrt.targets.registry import target_support

__all__ = ["phase_transport", "plan_repo", "tokenizer_dir_of"]


def _abs(path: Path) -> Path:
    return Path(os.path.abspath(path))


def tokenizer_dir_of(dep: Deployment, layout: EngineLayout) -> str:
    """Where pre/postprocessing load the tokenizer (the target decides; reference: the one
    ``pdtrt build`` writes, trtllm: the HF checkpoint or the Hub name)."""
    return target_support(dep.spec.target).tokenizer_dir(dep, layout)


def plan_repo(dep: Deployment, *, mode: RepoMode, engines_root: Path) -> RepoPlan:
    """Everything a repository of ``mode`` for ``dep`` holds; raises :class:`RepoError`."""
    spec = dep.spec
    _check_mode(spec, mode)
    support = target_support(spec.target)
    layout = EngineLayout(_abs(engines_root), spec.name)
    limits = {p: resolve_limits(dep, p, manifest_if_present(layout.phase_dir(p)),
                                defaults=support.engine_defaults) for p in Phase}
    remote = _remote_pools(spec, mode)
    engines = _engine_uses(spec, mode, layout, limits)
    tokenizer_dir = support.tokenizer_dir(dep, layout)
    launch = support.plan_launch(dep, engines, layout=layout, tokenizer_dir=tokenizer_dir)
    models = [support.engine_model(dep, e, launch=launch) for e in engines]
    ensembles = _ensembles(mode, limits, engine_step_map(spec.target))
    if mode.has_disaggregated:
        models.append(_router(dep, support, mode, limits))
    if ensembles:
        pre, post = _tokenizer_models(max(e.max_batch_size for e in ensembles), tokenizer_dir)
        models = [pre, *models, post]
    models.append(health_model())
    return RepoPlan(
        target=spec.target, mode=mode, models=tuple(models), ensembles=tuple(ensembles),
        engine_dirs={e.model: e.engine_dir for e in engines}, tokenizer_dir=tokenizer_dir,
        limits=limits, launch=launch, remote=remote,
        root_files=support.launch_files(dep, launch) if launch is not None else ())


def _check_mode(spec: DeploymentSpec, mode: RepoMode) -> None:
    if not mode.has_disaggregated or mode.has_aggregated or spec.router.aggregated_endpoints:
        return
    for key, value, what in (
            ("aggregated_below_tokens", spec.router.aggregated_below_tokens,
             "short prompts"),
            ("fallback_to_aggregated", spec.router.fallback_to_aggregated,
             "a failed disaggregated path")):
        if value:
            raise RepoError(
                f"router.{key} is {str(value).lower()}, but a --mode disaggregated repository "
                f"has no aggregated model to send {what} to",
                hint=f"use --mode both, list router.aggregated_endpoints, or unset "
                f"router.{key}")


def _remote_pools(spec: DeploymentSpec, mode: RepoMode) -> dict[str, str]:
    """The pools this repository's router calls in other servers: pool -> their HOST:PORTs
    (comma-separated)."""
    if not mode.has_disaggregated:
        return {}
    return {str(phase): ",".join(urls) for phase, urls in spec.endpoints.items()}


def _engine_uses(spec: DeploymentSpec, mode: RepoMode, layout: EngineLayout,
                 limits: dict[Phase, PhaseLimits]) -> list[EngineUse]:
    """The engine models of a ``mode`` repository, in model order (prefill, decode,
    aggregated): each pool's local endpoints. A ``--mode pools`` repository (the one another
    server serves) holds the models the pools' remote endpoints name instead."""
    chosen: list[tuple[str, Role, Phase, int]] = []  # (model, role, phase, instances)
    if mode is RepoMode.POOLS:
        if not spec.endpoints:
            raise RepoError(f"deployment '{spec.name}' has no pool with an endpoint, so there "
                            "is nothing for a --mode pools repository to serve",
                            hint="set prefill.endpoint / decode.endpoint to this server's "
                            "HOST:PORT (docs/examples/reference-remote.yaml), or use --mode both")
        for phase in Phase:
            chosen += _uses(Role.serving(phase), phase,
                            [e for e in spec.pool_endpoints(phase) if not e.is_local])
    elif mode.has_disaggregated:
        for phase in Phase:
            chosen += _uses(Role.serving(phase), phase,
                            [e for e in spec.pool_endpoints(phase) if e.is_local])
    if mode.has_aggregated:
        local = [e for e in spec.aggregated_endpoints() if e.is_local]
        if ModelName.AGGREGATED not in {e.model for e in local}:
            local.insert(0, EndpointSpec(model=ModelName.AGGREGATED,
                                         instances=spec.prefill.instances))
        chosen += _uses(Role.AGGREGATED, Phase.PREFILL, local)
    return [EngineUse(model=name, role=role, phase=phase, engine_dir=layout.phase_dir(phase),
                      limits=limits[phase], instances=instances)
            for name, role, phase, instances in chosen]


def _uses(role: Role, phase: Phase, endpoints: list[EndpointSpec]
          ) -> list[tuple[str, Role, Phase, int]]:
    """One engine model per distinct model name (two servers may serve one ``decode``)."""
    seen: dict[str, int] = {}
    for e in endpoints:
        seen.setdefault(e.model, e.instances)
    return [(name, role, phase, instances) for name, instances in seen.items()]


def _listed(endpoints: tuple[EndpointSpec, ...]) -> str:
    """A pool's ``*_endpoints`` parameter: "" for a pool of one (``*_model`` and ``*_url``
    name it, as in repositories written by hand)."""
    if len(endpoints) < 2:
        return ""
    return format_endpoints(endpoints)


def phase_transport(spec: DeploymentSpec) -> PhaseTransport:
    """``router.phase_transport`` resolved: ``auto`` is grpc, except on trtllm-0.21 (its MPI
    launch does not give the router its server's address), where it is bls."""
    chosen = spec.router.phase_transport
    if chosen is not PhaseTransport.AUTO:
        return chosen
    return PhaseTransport.BLS if spec.target is Target.TRTLLM_0_21 else PhaseTransport.GRPC


def _check_conditional(spec: DeploymentSpec, decode: PhaseLimits) -> None:
    """Conditional disaggregation sends whole requests to the decode engine: only prompts it
    takes in one step, and only on targets whose decode model is verified to take them."""
    router = spec.router
    if not (router.max_local_prefill_tokens or router.max_prefill_queue_depth):
        return
    if spec.target is Target.TRTLLM_0_21:
        raise RepoError("conditional disaggregation (router.max_local_prefill_tokens, "
                        "router.max_prefill_queue_depth) is not supported on trtllm-0.21: "
                        "whether its decode model serves context_and_generation requests is "
                        "not verified", hint="set both to 0, or use target trtllm-1.2")
    if router.max_local_prefill_tokens > decode.max_num_tokens:
        raise RepoError(f"router.max_local_prefill_tokens is {router.max_local_prefill_tokens} "
                        f"but the decode engine takes at most {decode.max_num_tokens} tokens "
                        "in one step (its max_num_tokens)",
                        hint=f"set router.max_local_prefill_tokens to {decode.max_num_tokens} "
                        "or less")


def _check_kv_routing(spec: DeploymentSpec) -> None:
    """KV-aware routing reads the engines' KV events: block reuse on a pool, an engine model
    that publishes them (pdtrt's LLM-API one), and one block size to hash prompts by; KV-capacity
    routing reads their KV stats, which only pdtrt's LLM-API engine model answers with."""
    if spec.router.routing is Routing.KV_CAPACITY and spec.target is Target.TRTLLM_0_21:
        raise RepoError("router.routing kv_capacity is not supported on trtllm-0.21: NVIDIA's "
                        "tensorrt_llm model does not answer KV-capacity requests",
                        hint="use target trtllm-1.2, or router.routing least_load")
    if spec.router.routing is not Routing.KV_AWARE:
        return
    if spec.target is Target.TRTLLM_0_21:
        raise RepoError("router.routing kv_aware is not supported on trtllm-0.21: NVIDIA's "
                        "tensorrt_llm model does not publish KV cache events",
                        hint="use target trtllm-1.2, or router.routing least_load")
    if not any(spec.pool(p).engine.enable_block_reuse for p in (Phase.PREFILL, Phase.DECODE)):
        raise RepoError("router.routing kv_aware needs a pool whose engine reuses KV blocks: "
                        "without block reuse no engine holds a prefix for the router to find",
                        hint="set prefill.engine.enable_block_reuse and/or "
                        "decode.engine.enable_block_reuse to true (docs/serve.md, KV-aware "
                        "routing), or router.routing least_load")


def _router(dep: Deployment, support: TargetSupport, mode: RepoMode,
            limits: dict[Phase, PhaseLimits]) -> ModelPlan:
    """pdtrt's router: decoupled like the target's engine models, whose calls it forwards.
    ``prefill_model`` / ``prefill_url`` name each pool's first endpoint (its only one, and
    what tools that know one endpoint per pool read); ``prefill_endpoints`` all of them when
    there are several."""
    spec = dep.spec
    transport = phase_transport(spec)
    _check_conditional(spec, limits[Phase.DECODE])
    _check_kv_routing(spec)
    if transport is PhaseTransport.GRPC and spec.target is Target.TRTLLM_0_21:
        raise RepoError("router.phase_transport grpc is not supported on trtllm-0.21 (its MPI "
                        "launch does not give the router its server's address)",
                        hint="set router.phase_transport: bls, or use target trtllm-1.2")
    phases = (Phase.PREFILL, Phase.DECODE)
    pools = {p: spec.pool_endpoints(p) for p in phases}
    first = {p: pools[p][0] for p in phases}
    router, health = spec.router, spec.router.health
    return python_model(
        ModelName.ROUTER, Role.ROUTER, batch=_disaggregated_batch(limits),
        decoupled=support.engine_decoupled(spec), io=ROUTER_IO, count=router.instances,
        params=(
            (Param.ROLE, Role.ROUTER),
            (Param.PREFILL_MODEL, first[Phase.PREFILL].model),
            (Param.DECODE_MODEL, first[Phase.DECODE].model),
            (Param.AGGREGATED_MODEL, ModelName.AGGREGATED if mode.has_aggregated else ""),
            (Param.AGGREGATED_BELOW_TOKENS, str(router.aggregated_below_tokens)),
            (Param.EARLY_FIRST_TOKEN, param_flag(router.early_first_token)),
            (Param.PREFILL_URL, first[Phase.PREFILL].url),
            (Param.DECODE_URL, first[Phase.DECODE].url),
            (Param.PREFILL_ENDPOINTS, _listed(pools[Phase.PREFILL])),
            (Param.DECODE_ENDPOINTS, _listed(pools[Phase.DECODE])),
            (Param.AGGREGATED_ENDPOINTS, _aggregated_listed(spec, mode)),
            (Param.FALLBACK_TO_AGGREGATED, param_flag(router.fallback_to_aggregated)),
            (Param.MAX_ATTEMPTS, str(router.max_attempts)),
            (Param.MAX_MIGRATIONS, str(router.max_migrations)),
            (Param.LIVENESS_S, param_number(health.liveness_s)),
            (Param.KV_TRANSFER_DEADLINE_S,
             param_number(spec.kv_transfer.timeout_s + KV_TRANSFER_DEADLINE_MARGIN_S)),
            (Param.PROBE_TIMEOUT_S, param_number(health.probe_timeout_s)),
            (Param.PROBE_INTERVAL_S, param_number(health.probe_interval_s)),
            (Param.ERROR_OUTPUT, support.engine_error_output),
            (Param.PHASE_TRANSPORT, str(transport)),
            (Param.MAX_LOCAL_PREFILL_TOKENS, str(router.max_local_prefill_tokens)),
            (Param.MAX_PREFILL_QUEUE_DEPTH, param_number(router.max_prefill_queue_depth)),
            (Param.LOCAL_PREFILL_LIMIT, str(limits[Phase.DECODE].max_num_tokens)),
            (Param.ROUTING, str(router.routing)),
            (Param.KV_OVERLAP_WEIGHT, param_number(router.kv_overlap_weight)),
            (Param.KV_EVENTS_INTERVAL_S, param_number(router.kv_events_interval_s)),
            (Param.KV_BLOCK_TOKENS, str(limits[Phase.DECODE].tokens_per_block)),
            (Param.PHASE_INPUT_NAMES, ",".join(
                f"{core}:{name}" for core, name in engine_input_renames(spec.target).items())),
            (Param.MAX_INPUT_LEN, str(min(limits[p].max_input_len for p in phases))),
            (Param.MAX_SEQ_LEN, str(min(limits[p].max_seq_len for p in phases))),
        ))


def _aggregated_listed(spec: DeploymentSpec, mode: RepoMode) -> str:
    """``aggregated_endpoints``: the listed ones (the local ``aggregated`` first when the
    repository has it); "" when ``aggregated_model`` alone is the path."""
    listed = spec.aggregated_endpoints()
    if not listed:
        return ""
    if mode.has_aggregated and ModelName.AGGREGATED not in {e.model for e in listed if e.is_local}:
        listed = (EndpointSpec(model=ModelName.AGGREGATED, instances=spec.prefill.instances),
                  *listed)
    return format_endpoints(listed)


def _disaggregated_batch(limits: dict[Phase, PhaseLimits]) -> int:
    return max(limits[Phase.PREFILL].max_batch_size, limits[Phase.DECODE].max_batch_size)


def _ensembles(mode: RepoMode, limits: dict[Phase, PhaseLimits],
               engine_map: StepMap) -> list[EnsemblePlan]:
    """The text-in, text-out ensembles: through the router, and through the aggregated model
    (which runs on the prefill engine and pool)."""
    ensembles = []
    if mode.has_disaggregated:
        ensembles.append(EnsemblePlan(name=ModelName.ENSEMBLE,
                                      max_batch_size=_disaggregated_batch(limits),
                                      io=ensemble_io(ENGINE_STEP_MAP),
                                      steps=_steps(ModelName.ROUTER)))
    if mode.has_aggregated:
        ensembles.append(EnsemblePlan(name=ModelName.ENSEMBLE_AGGREGATED,
                                      max_batch_size=limits[Phase.PREFILL].max_batch_size,
                                      io=ensemble_io(engine_map),
                                      steps=_steps(ModelName.AGGREGATED, engine_map)))
    return ensembles


def _tokenizer_models(batch: int, tokenizer_dir: str) -> tuple[ModelPlan, ModelPlan]:
    """Preprocessing and postprocessing, as large as the largest ensemble they serve."""
    tok = ((Param.TOKENIZER_DIR, tokenizer_dir),)
    return (python_model(ModelName.PREPROCESSING, Role.PREPROCESSING, batch=batch,
                         decoupled=False, io=PREPROCESSING_IO, count=1,
                         params=((Param.ROLE, Role.PREPROCESSING), *tok)),
            python_model(ModelName.POSTPROCESSING, Role.POSTPROCESSING, batch=batch,
                         decoupled=False, io=POSTPROCESSING_IO, count=1,
                         params=((Param.ROLE, Role.POSTPROCESSING), *tok)))


def _steps(middle: ModelName, middle_map: StepMap = ENGINE_STEP_MAP
           ) -> tuple[tuple[ModelName, StepMap], ...]:
    return ((ModelName.PREPROCESSING, PREPROCESSING_STEP_MAP), (middle, middle_map),
            (ModelName.POSTPROCESSING, postprocessing_step_map(middle_map)))
