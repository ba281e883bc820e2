"""Checks across models of a repository: ensemble wiring, router targets, decoupling.

Works on parsed ``ModelConfig`` protobufs (any repository, generated or hand-edited) and returns
problem messages, each starting with the model it is about. An ensemble tensor is an ensemble
input or a step's output; every step input must be fed by one with the same dtype and
compatible dims (-1 matches anything); every required step input must be mapped; an ensemble
may not allow a larger batch than any of its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pdtrt.blueprint.spec import ENDPOINT
from pdtrt.endpoints import parse_endpoints
from pdtrt.engine_io import Param, Role
from pdtrt.repo.pbtxt import EnsembleStep, ModelConfig, ModelTensor, data_type_name
from pdtrt.suggest import did_you_mean

__all__ = ["CONTEXT_MODEL_NAME", "ENGINE_REFERENCE_PARAMS", "GENERATION_MODEL_NAME",
           "dims_compatible", "ensemble_problems", "parameter", "router_problems"]

# NVIDIA's disaggregated BLS: the parameters naming its prefill and decode models
CONTEXT_MODEL_NAME = "context_model_name"
GENERATION_MODEL_NAME = "generation_model_name"
# parameters that name other models: pdtrt's router, and NVIDIA's disaggregated BLS
ENGINE_REFERENCE_PARAMS = (Param.PREFILL_MODEL, Param.DECODE_MODEL, Param.AGGREGATED_MODEL,
                           CONTEXT_MODEL_NAME, GENERATION_MODEL_NAME)


def parameter(config: ModelConfig, key: str) -> str | None:
    """A string parameter of ``config``, or None when absent."""
    return config.parameters[key].string_value if key in config.parameters else None


def dims_compatible(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


_ENSEMBLE_INPUT = "ensemble input"  # the source of a tensor that no step produced


@dataclass(frozen=True)
class _Tensor:
    dtype: int
    dims: tuple[int, ...]
    source: str


def _dims(d: object) -> str:
    return "[" + ", ".join(str(x) for x in d) + "]"  # type: ignore[attr-defined]


def _unknown_model(name: str, models: Mapping[str, ModelConfig]) -> str:
    return f"'{name}', which is not a model of this repository{did_you_mean(name, models)}"


def ensemble_problems(name: str, cfg: ModelConfig, models: Mapping[str, ModelConfig],
                      broken: frozenset[str] = frozenset()) -> list[str]:
    """Wiring problems of the ensemble ``name``. Steps on ``broken`` models (whose config did
    not parse: already reported) are skipped, and so are the checks they would mislead."""
    steps = list(cfg.ensemble_scheduling.step)
    problems = [f"{name}: ensemble has no ensemble_scheduling steps"] if not steps else []
    tensors, complete = _tensors(name, cfg, steps, models, broken, problems)
    for n, step in enumerate(steps, 1):
        model = models.get(step.model_name)
        if model is not None:
            problems += _step_problems(name, cfg, n, step, model, tensors, complete)
    if complete:
        problems += _output_problems(name, cfg, tensors)
    return problems


def _tensors(name: str, cfg: ModelConfig, steps: list[EnsembleStep],
             models: Mapping[str, ModelConfig], broken: frozenset[str],
             problems: list[str]) -> tuple[dict[str, _Tensor], bool]:
    """The ensemble's tensors (its inputs, then each step's mapped outputs), and whether every
    step's model is known (else a missing tensor may be that step's: not reported)."""
    complete = True
    tensors = {i.name: _Tensor(i.data_type, tuple(i.dims), _ENSEMBLE_INPUT) for i in cfg.input}
    for n, step in enumerate(steps, 1):
        model = models.get(step.model_name)
        if step.model_name in broken:
            complete = False
            continue
        if model is None:
            complete = False
            problems.append(f"{name}: step {n} runs {_unknown_model(step.model_name, models)}")
            continue
        outputs = {o.name: o for o in model.output}
        for key, value in sorted(step.output_map.items()):
            out = outputs.get(key)
            if out is None:
                problems.append(f"{name}: step {n} ({step.model_name}) maps output '{key}', "
                                f"which {step.model_name} does not have"
                                f"{did_you_mean(key, outputs)}")
            elif value in tensors:
                problems.append(f"{name}: tensor '{value}' is produced twice "
                                f"({tensors[value].source} and {step.model_name}.{key})")
            else:
                tensors[value] = _Tensor(out.data_type, tuple(out.dims),
                                         f"{step.model_name}.{key}")
    return tensors, complete


def _step_problems(name: str, cfg: ModelConfig, n: int, step: EnsembleStep,
                   model: ModelConfig, tensors: dict[str, _Tensor],
                   complete: bool) -> list[str]:
    """Step ``n``'s inputs: each fed with its dtype and dims, the required ones mapped; and its
    model's batch size at least the ensemble's."""
    problems = []
    where = f"{name}: step {n} ({step.model_name})"
    inputs = {i.name: i for i in model.input}
    for key, value in sorted(step.input_map.items()):
        inp = inputs.get(key)
        if inp is None:
            problems.append(f"{where} maps input '{key}', which {step.model_name} does not "
                            f"have{did_you_mean(key, inputs)}")
            continue
        src = tensors.get(value)
        if src is None and not complete:
            continue
        if src is None:
            problems.append(f"{where} input '{key}' reads '{value}', which is neither an "
                            f"ensemble input nor a step output{did_you_mean(value, tensors)}")
        else:
            problems += _mismatch(f"{where} input '{key}'", inp, f"'{value}' ({src.source})", src)
    for inp in model.input:
        if not inp.optional and inp.name not in step.input_map:
            problems.append(f"{where}: required input '{inp.name}' is not mapped")
    if cfg.max_batch_size > model.max_batch_size:
        problems.append(f"{name}: max_batch_size {cfg.max_batch_size} exceeds step "
                        f"{step.model_name}'s {model.max_batch_size}")
    return problems


def _output_problems(name: str, cfg: ModelConfig, tensors: dict[str, _Tensor]) -> list[str]:
    """Every ensemble output produced by a step, with its dtype and dims."""
    problems = []
    for out in cfg.output:
        src = tensors.get(out.name)
        if src is None or src.source == _ENSEMBLE_INPUT:
            problems.append(f"{name}: output '{out.name}' is not produced by any step")
        else:
            problems += _mismatch(f"{name}: output '{out.name}'", out, src.source, src)
    return problems


def _mismatch(what: str, tensor: ModelTensor, src_name: str, src: _Tensor) -> list[str]:
    """Whether ``src`` can feed ``tensor`` (``what``): the same dtype, compatible dims."""
    if src.dtype != tensor.data_type:
        return [f"{what} is {data_type_name(tensor.data_type)} but {src_name} is "
                f"{data_type_name(src.dtype)}"]
    if not dims_compatible(src.dims, tuple(tensor.dims)):
        return [f"{what} has dims {_dims(tensor.dims)} but {src_name} has dims "
                f"{_dims(src.dims)}"]
    return []


def router_problems(name: str, cfg: ModelConfig, models: Mapping[str, ModelConfig],
                    broken: frozenset[str] = frozenset()) -> list[str]:
    """Parameters naming models must name existing models; decoupling must agree with them."""
    problems: list[str] = []
    is_pdtrt_router = parameter(cfg, Param.ROLE) == Role.ROUTER
    remote: set[str] = set()  # model names served by another Triton server
    if is_pdtrt_router:
        for key, url_key in ((Param.PREFILL_MODEL, Param.PREFILL_URL),
                             (Param.DECODE_MODEL, Param.DECODE_URL)):
            if not parameter(cfg, key):
                problems.append(f"{name}: parameter '{key}' is missing or empty")
            url = parameter(cfg, url_key)
            if url:
                if not ENDPOINT.match(str(url)):
                    problems.append(f"{name}: parameter '{url_key}' is {url!r}, not a gRPC "
                                    "address HOST:PORT")
                remote.add(str(parameter(cfg, key)))
        problems += _endpoint_lists(name, cfg, models, broken, remote)
        below = parameter(cfg, Param.AGGREGATED_BELOW_TOKENS) or "0"
        if not below.isdigit():
            problems.append(f"{name}: parameter '{Param.AGGREGATED_BELOW_TOKENS}' must be a "
                            f"whole number, got {below!r}")
        elif int(below) > 0 and not parameter(cfg, Param.AGGREGATED_MODEL):
            problems.append(f"{name}: '{Param.AGGREGATED_BELOW_TOKENS}' is {below} but "
                            f"'{Param.AGGREGATED_MODEL}' is empty: short prompts have nowhere "
                            "to go")
    decoupled = cfg.model_transaction_policy.decoupled
    for key in ENGINE_REFERENCE_PARAMS:
        target = parameter(cfg, key)
        if not target or target in broken or target in remote:
            continue
        model = models.get(target)
        if model is None:
            problems.append(f"{name}: parameter '{key}' names {_unknown_model(target, models)}")
        elif model.model_transaction_policy.decoupled != decoupled:
            problems.append(
                f"{name}: decoupled is {str(decoupled).lower()} but {target} (its '{key}') has "
                f"decoupled {str(model.model_transaction_policy.decoupled).lower()}: a "
                "streaming path must be decoupled end to end")
    return problems


_ENDPOINT_LISTS = (Param.PREFILL_ENDPOINTS, Param.DECODE_ENDPOINTS, Param.AGGREGATED_ENDPOINTS)


def _endpoint_lists(name: str, cfg: ModelConfig, models: Mapping[str, ModelConfig],
                    broken: frozenset[str], remote: set[str]) -> list[str]:
    """The router's endpoint lists: they parse, and their local models exist. The models of
    remote endpoints join ``remote`` (they live in other servers)."""
    problems = []
    for key in _ENDPOINT_LISTS:
        try:
            endpoints = parse_endpoints(parameter(cfg, key) or "")
        except ValueError as exc:
            problems.append(f"{name}: parameter '{key}': {exc}")
            continue
        remote.update(e.model for e in endpoints if e.url)
        named = {parameter(cfg, k) for k in ENGINE_REFERENCE_PARAMS}  # reported there
        problems += [f"{name}: parameter '{key}' names {_unknown_model(e.model, models)}"
                     for e in endpoints if e.is_local and e.model not in models
                     and e.model not in broken and e.model not in named]
    return problems
