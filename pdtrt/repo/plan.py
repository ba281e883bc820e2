"""What goes into a generated model repository: every model's config, as typed values.

:func:`plan_repo` turns a :class:`Deployment`, a :class:`RepoMode` and the engines root into a
:class:`RepoPlan` (:mod:`pdtrt.repo.models`) in named steps: which engine models the mode asks
for and which pools live in other servers; each phase's limits (:mod:`pdtrt.repo.limits`); what
the target makes of them -- the engine models' backend, I/O and parameters, the tokenizer
directory, the launch plan and its files (:mod:`pdtrt.targets`); then the router, the ensembles
and pre/postprocessing, which are the same on every target. All numbers are computed here or by
the target; :mod:`pdtrt.repo.render` only formats them. Batch sizes: each engine model uses its
phase's ``max_batch_size``; the router and the disaggregated ensemble the larger of prefill's
and decode's; the aggregated ensemble the aggregated model's; preprocessing and postprocessing
the largest of all (an ensemble may not exceed any of its steps).
"""

from __future__ import annotations

import os
from pathlib import Path

from pdtrt.build.manifest import EngineLayout
from pdtrt.engine_io import (
    ENGINE_STEP_MAP,
    ENSEMBLE_IO,
    POSTPROCESSING_IO,
    POSTPROCESSING_STEP_MAP,
    PREPROCESSING_IO,
    PREPROCESSING_STEP_MAP,
    ROUTER_IO,
    ModelName,
    Param,
    Role,
    StepMap,
)
from pdtrt.enums import Phase
from pdtrt.errors import RepoError
from pdtrt.repo.limits import PhaseLimits, manifest_if_present, resolve_limits
from pdtrt.repo.models import (
    EngineUse,
    EnsemblePlan,
    ModelPlan,
    RepoMode,
    RepoPlan,
    param_flag,
    python_model,
)
from pdtrt.spec.deployment import Deployment
from pdtrt.spec.schema import DeploymentSpec
from pdtrt.targets.base import TargetSupport
from pdtrt.targets.registry import target_support

__all__ = ["plan_repo", "tokenizer_dir_of"]

# the pools' engine models: (model, role, phase whose engine and pool it uses)
_POOLS = ((ModelName.PREFILL, Role.PREFILL, Phase.PREFILL),
          (ModelName.DECODE, Role.DECODE, Phase.DECODE))


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
    engines = _engine_uses(spec, mode, layout, limits, remote)
    tokenizer_dir = support.tokenizer_dir(dep, layout)
    launch = support.plan_launch(dep, engines, layout=layout, tokenizer_dir=tokenizer_dir)
    models = [support.engine_model(dep, e, launch=launch) for e in engines]
    ensembles = _ensembles(mode, limits)
    if mode.has_disaggregated:
        models.append(_router(dep, support, mode, limits, remote))
    if ensembles:
        pre, post = _tokenizer_models(max(e.max_batch_size for e in ensembles), tokenizer_dir)
        models = [pre, *models, post]
    return RepoPlan(
        target=spec.target, mode=mode, models=tuple(models), ensembles=tuple(ensembles),
        engine_dirs={e.model: e.engine_dir for e in engines}, tokenizer_dir=tokenizer_dir,
        limits=limits, launch=launch, remote=remote,
        root_files=support.launch_files(dep, launch) if launch is not None else ())


def _check_mode(spec: DeploymentSpec, mode: RepoMode) -> None:
    if mode is RepoMode.DISAGGREGATED and spec.router.aggregated_below_tokens > 0:
        raise RepoError(
            f"router.aggregated_below_tokens is {spec.router.aggregated_below_tokens}, but a "
            "--mode disaggregated repository has no aggregated model to route short prompts to",
            hint="use --mode both, or set router.aggregated_below_tokens to 0")


def _endpoints(spec: DeploymentSpec) -> dict[ModelName, str]:
    """The pools' engine models served by another Triton server, and its HOST:PORT."""
    return {name: spec.endpoints[phase] for name, _, phase in _POOLS if phase in spec.endpoints}


def _remote_pools(spec: DeploymentSpec, mode: RepoMode) -> dict[ModelName, str]:
    """The engine models this repository's router calls in another server."""
    return _endpoints(spec) if mode.has_disaggregated else {}


def _engine_uses(spec: DeploymentSpec, mode: RepoMode, layout: EngineLayout,
                 limits: dict[Phase, PhaseLimits],
                 remote: dict[ModelName, str]) -> list[EngineUse]:
    """The engine models of a ``mode`` repository, in model order (prefill, decode,
    aggregated). A pool with an endpoint has no local model here -- and is the only kind a
    ``--mode pools`` repository (the one that other server serves) holds."""
    if mode is RepoMode.POOLS:
        served = _endpoints(spec)
        if not served:
            raise RepoError(f"deployment '{spec.name}' has no pool with an endpoint, so there "
                            "is nothing for a --mode pools repository to serve",
                            hint="set prefill.endpoint / decode.endpoint to this server's "
                            "HOST:PORT (docs/examples/reference-remote.yaml), or use --mode both")
        chosen = [pool for pool in _POOLS if pool[0] in served]
    elif mode.has_disaggregated:
        chosen = [pool for pool in _POOLS if pool[0] not in remote]
    else:
        chosen = []
    if mode.has_aggregated:
        chosen.append((ModelName.AGGREGATED, Role.AGGREGATED, Phase.PREFILL))
    return [EngineUse(model=name, role=role, phase=phase, engine_dir=layout.phase_dir(phase),
                      limits=limits[phase]) for name, role, phase in chosen]


def _router(dep: Deployment, support: TargetSupport, mode: RepoMode,
            limits: dict[Phase, PhaseLimits], remote: dict[ModelName, str]) -> ModelPlan:
    """pdtrt's router: decoupled like the target's engine models, whose calls it forwards."""
    spec = dep.spec
    phases = (Phase.PREFILL, Phase.DECODE)
    return python_model(
        ModelName.ROUTER, Role.ROUTER, batch=_disaggregated_batch(limits),
        decoupled=support.engine_decoupled(spec), io=ROUTER_IO, count=spec.router.instances,
        params=(
            (Param.ROLE, Role.ROUTER),
            (Param.PREFILL_MODEL, ModelName.PREFILL),
            (Param.DECODE_MODEL, ModelName.DECODE),
            (Param.AGGREGATED_MODEL, ModelName.AGGREGATED if mode.has_aggregated else ""),
            (Param.AGGREGATED_BELOW_TOKENS, str(spec.router.aggregated_below_tokens)),
            (Param.EARLY_FIRST_TOKEN, param_flag(spec.router.early_first_token)),
            (Param.PREFILL_URL, remote.get(ModelName.PREFILL, "")),
            (Param.DECODE_URL, remote.get(ModelName.DECODE, "")),
            (Param.ERROR_OUTPUT, support.engine_error_output),
            (Param.MAX_INPUT_LEN, str(min(limits[p].max_input_len for p in phases))),
            (Param.MAX_SEQ_LEN, str(min(limits[p].max_seq_len for p in phases))),
        ))


def _disaggregated_batch(limits: dict[Phase, PhaseLimits]) -> int:
    return max(limits[Phase.PREFILL].max_batch_size, limits[Phase.DECODE].max_batch_size)


def _ensembles(mode: RepoMode, limits: dict[Phase, PhaseLimits]) -> list[EnsemblePlan]:
    """The text-in, text-out ensembles: through the router, and through the aggregated model
    (which runs on the prefill engine and pool)."""
    ensembles = []
    if mode.has_disaggregated:
        ensembles.append(EnsemblePlan(name=ModelName.ENSEMBLE,
                                      max_batch_size=_disaggregated_batch(limits),
                                      io=ENSEMBLE_IO, steps=_steps(ModelName.ROUTER)))
    if mode.has_aggregated:
        ensembles.append(EnsemblePlan(name=ModelName.ENSEMBLE_AGGREGATED,
                                      max_batch_size=limits[Phase.PREFILL].max_batch_size,
                                      io=ENSEMBLE_IO, steps=_steps(ModelName.AGGREGATED)))
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


def _steps(middle: ModelName) -> tuple[tuple[ModelName, StepMap], ...]:
    return ((ModelName.PREPROCESSING, PREPROCESSING_STEP_MAP), (middle, ENGINE_STEP_MAP),
            (ModelName.POSTPROCESSING, POSTPROCESSING_STEP_MAP))
