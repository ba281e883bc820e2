"""Cross-field rules of the deployment spec.

Each rule is a small function returning :class:`SpecIssue` s that name the YAML path and show
the values (and the arithmetic) involved. :func:`shape_issues` needs only the spec;
:func:`resource_issues` also needs the model facts and the GPU catalog. Both report *every*
violated rule, so a user fixes a spec in one round. A target's own rules (and whether it needs
a GPU or can use remote pools) are the target's to say (:mod:`pdtrt.targets`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pdtrt.blueprint.spec import UCX_TRANSPORTS, DeploymentSpec
from pdtrt.enums import DeviceKind, KVDType, Phase, WeightQuant
from pdtrt.errors import SpecIssue
from pdtrt.facts.catalog import GPU, Catalog
from pdtrt.facts.memory import MemoryFit, fit
from pdtrt.facts.model import ModelFacts
from pdtrt.spec.pool_rules import POOL_RULES
from pdtrt.suggest import did_you_mean
from pdtrt.targets.registry import target_support

__all__ = ["endpoint_gpu_issues", "phase_fit", "resolve_gpus", "resource_issues",
           "shape_issues"]

Rule = Callable[[DeploymentSpec], Iterator[SpecIssue]]


def _tokens_per_block_equal(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    p, d = spec.prefill.engine.tokens_per_block, spec.decode.engine.tokens_per_block
    if p != d:
        yield SpecIssue(
            path="decode.engine.tokens_per_block",
            message=f"prefill and decode must use the same tokens_per_block to exchange KV "
            f"blocks: prefill {p} != decode {d}",
        )


def _tokens_per_block_power_of_two(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    for phase in Phase:
        tpb = spec.pool(phase).engine.tokens_per_block
        if tpb & (tpb - 1):
            yield SpecIssue(path=f"{phase}.engine.tokens_per_block",
                            message=f"tokens_per_block must be a power of two, got {tpb}")


def _kv_dtype_equal(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    p, d = spec.kv_cache_dtype(Phase.PREFILL), spec.kv_cache_dtype(Phase.DECODE)
    if p != d:
        yield SpecIssue(
            path="decode.engine.kv_cache_dtype",
            message=f"prefill and decode must store the KV cache in the same dtype: prefill "
            f"{p} != decode {d}",
        )


def _sampler_equal(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    """One sampler for both phases: a disaggregated request's first token comes from the
    prefill's and the rest from the decode's, so two samplers would apply its sampling inputs
    to one token and ignore them for the others (or refuse it half-way)."""
    p, d = spec.prefill.engine.sampler, spec.decode.engine.sampler
    if p != d:
        yield SpecIssue(
            path="decode.engine.sampler",
            message=f"prefill and decode must use the same sampler: a request's first token "
            f"comes from the prefill's, the rest from the decode's: prefill {p} != decode {d}",
        )


def _stream_interval_on_decode(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    """``stream_interval`` is the decode's: a context-only request makes one token, and the
    aggregated model, which generates like the decode, takes the decode's value."""
    value = spec.prefill.engine.stream_interval
    if value != 1:
        yield SpecIssue(
            path="prefill.engine.stream_interval",
            message=f"stream_interval {value} on the prefill pool has nothing to space out: its "
            "context-only requests make one token each, and the aggregated model takes "
            "decode.engine.stream_interval; set it there")


def _input_within_seq(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    for phase in Phase:
        eng = spec.pool(phase).engine
        if eng.max_input_len and eng.max_seq_len and eng.max_input_len > eng.max_seq_len:
            yield SpecIssue(
                path=f"{phase}.engine.max_input_len",
                message=f"max_input_len {eng.max_input_len} > max_seq_len {eng.max_seq_len}; "
                "a prompt cannot be longer than the whole sequence",
            )


def _workload_within_limits(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    wl = spec.workload
    for phase in Phase:
        eng = spec.pool(phase).engine
        if eng.max_input_len and wl.isl > eng.max_input_len:
            yield SpecIssue(
                path=f"{phase}.engine.max_input_len",
                message=f"workload.isl {wl.isl} > max_input_len {eng.max_input_len}: the "
                "workload's prompts would be rejected",
            )
    max_seq = spec.decode.engine.max_seq_len
    if max_seq and wl.seq_len > max_seq:
        yield SpecIssue(
            path="decode.engine.max_seq_len",
            message=f"workload.isl + workload.osl = {wl.isl} + {wl.osl} = {wl.seq_len} > "
            f"max_seq_len {max_seq}",
        )


def _target_rules(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    yield from target_support(spec.target).spec_issues(spec)


def _transports_known(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    for i, tls in enumerate(spec.kv_transfer.transports):
        if tls not in UCX_TRANSPORTS:
            yield SpecIssue(path=f"kv_transfer.transports.{i}",
                            message=f"unknown UCX transport '{tls}'"
                            f"{did_you_mean(tls, UCX_TRANSPORTS)}")


def _net_devices_agree_per_host(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    """Pools on one GPU type are served from one host (one server, one ``pdtrt.env``), so
    they cannot name different NICs."""
    prefill, decode = (spec.net_devices(p) for p in Phase)
    if spec.prefill.gpu == spec.decode.gpu and prefill != decode:
        yield SpecIssue(
            path="decode.net_devices" if spec.decode.net_devices is not None
            else "prefill.net_devices",
            message=f"prefill and decode are both on {spec.prefill.gpu}, served from one "
            f"host, but name different net_devices ({list(prefill)} vs {list(decode)}): set "
            "kv_transfer.net_devices once, or put the pools on different GPU types (hosts)")


def _ports_distinct(spec: DeploymentSpec) -> Iterator[SpecIssue]:
    seen: dict[int, str] = {}
    for field in ("grpc_port", "http_port", "metrics_port"):
        port = getattr(spec.serving, field)
        if port is None:
            continue
        if port in seen:
            yield SpecIssue(path=f"serving.{field}",
                            message=f"port {port} is already serving.{seen[port]}")
        seen[port] = field


SHAPE_RULES: tuple[Rule, ...] = (
    _tokens_per_block_equal,
    _tokens_per_block_power_of_two,
    _kv_dtype_equal,
    _sampler_equal,
    _stream_interval_on_decode,
    _input_within_seq,
    _workload_within_limits,
    _target_rules,
    _transports_known,
    _net_devices_agree_per_host,
    _ports_distinct,
    *POOL_RULES,
)


def shape_issues(spec: DeploymentSpec) -> list[SpecIssue]:
    """Violations of the rules that need only the spec itself."""
    return [issue for rule in SHAPE_RULES for issue in rule(spec)]


def _resolve(spec: DeploymentSpec, catalog: Catalog, name: str,
             path: str) -> GPU | SpecIssue:
    """The catalog entry of a GPU type the spec names at ``path``, or the issue with it."""
    gpu = catalog.find(name)
    if gpu is None:
        return SpecIssue(path=path, message=f"unknown GPU '{name}'"
                         f"{did_you_mean(name, catalog.keys)}; known: {', '.join(catalog.keys)}")
    if target_support(spec.target).needs_gpu and gpu.kind is not DeviceKind.GPU:
        return SpecIssue(path=path, message=f"target {spec.target} needs an NVIDIA GPU, not "
                         f"'{gpu.key}'")
    return gpu


def resolve_gpus(spec: DeploymentSpec, catalog: Catalog) -> tuple[dict[Phase, GPU],
                                                                   list[SpecIssue]]:
    """Catalog entries of both pools, and an issue for each unknown or unusable name."""
    gpus: dict[Phase, GPU] = {}
    issues: list[SpecIssue] = []
    for phase in Phase:
        found = _resolve(spec, catalog, spec.pool(phase).gpu, f"{phase}.gpu")
        if isinstance(found, SpecIssue):
            issues.append(found)
        else:
            gpus[phase] = found
    return gpus, issues


def phase_fit(spec: DeploymentSpec, phase: Phase, model: ModelFacts, gpu: GPU,
              *, tp: int | None = None) -> MemoryFit:
    """Memory fit of one GPU of ``phase``'s pool (at its TP unless ``tp`` is given).

    The prefill pool must hold one prompt (max_input_len, else workload.isl); the decode pool
    one whole sequence (max_seq_len, else workload.isl + workload.osl).
    """
    pool = spec.pool(phase)
    eng = pool.engine
    if phase is Phase.PREFILL:
        seq_len = eng.max_input_len or spec.workload.isl
    else:
        seq_len = eng.max_seq_len or spec.workload.seq_len
    return fit(
        model, gpu, tp=tp or pool.tp, pp=pool.pp, seq_len=seq_len, dtype=spec.model.dtype,
        weights=spec.weights(phase), kv_dtype=spec.kv_cache_dtype(phase),
        max_num_tokens=eng.max_num_tokens
        or target_support(spec.target).engine_defaults.max_num_tokens,
        tokens_per_block=eng.tokens_per_block,
        kv_cache_fraction=eng.kv_cache_free_gpu_mem_fraction,
    )


def _gpu_issue(spec: DeploymentSpec, phase: Phase, model: ModelFacts, gpu: GPU, *,
               gpu_path: str, tp_path: str) -> SpecIssue | None:
    """The first problem of ``phase``'s pool on ``gpu``: TP vs heads, FP8 support, fit."""
    pool = spec.pool(phase)
    problem = model.tp_problem(pool.tp)
    if problem:
        return SpecIssue(path=tp_path, message=f"{problem}; valid TP for {model.name}: "
                         f"{model.valid_tps()}")
    if pool.tp > gpu.max_gpus_per_node:
        return SpecIssue(path=tp_path, message=f"TP {pool.tp} > {gpu.max_gpus_per_node} "
                         f"{gpu.key} GPUs per node")
    if pool.pp > model.num_layers:
        return SpecIssue(path=f"{phase}.pp", message=f"PP {pool.pp} > {model.num_layers} "
                         f"layers of {model.name}")
    fp8_users = [what for what, uses in (
        ("weights", spec.weights(phase) is WeightQuant.FP8),
        ("kv_cache_dtype", spec.kv_cache_dtype(phase) is KVDType.FP8)) if uses]
    if fp8_users and gpu.kind is DeviceKind.GPU and not gpu.has_fp8:
        return SpecIssue(path=gpu_path, message=f"{gpu.key} (SM {gpu.compute_capability}) has "
                         f"no FP8 support, but {phase} uses fp8 {' and '.join(fp8_users)}")
    mem = phase_fit(spec, phase, model, gpu)
    if not mem.fits:
        return SpecIssue(path=tp_path, message=_no_fit_message(spec, phase, model, gpu, mem))
    return None


def resource_issues(spec: DeploymentSpec, model: ModelFacts,
                    gpus: dict[Phase, GPU]) -> list[SpecIssue]:
    """Violations that need the model facts and the GPUs: TP vs heads, FP8 support, fit."""
    found = (_gpu_issue(spec, phase, model, gpu, gpu_path=f"{phase}.gpu", tp_path=f"{phase}.tp")
             for phase, gpu in gpus.items())
    return [issue for issue in found if issue is not None]


def endpoint_gpu_issues(spec: DeploymentSpec, model: ModelFacts,
                        catalog: Catalog) -> list[SpecIssue]:
    """The same checks for an endpoint on another GPU type than its pool's (a mixed pool):
    the type is known and usable, and the pool's engine (TP, FP8, memory fit) runs on it."""
    issues: list[SpecIssue] = []
    for phase in Phase:
        pool = spec.pool(phase)
        for i, e in enumerate(pool.endpoints):
            if e.gpu is None or e.gpu == pool.gpu:
                continue
            path = f"{phase}.endpoints.{i}.gpu"
            found = _resolve(spec, catalog, e.gpu, path)
            issue = found if isinstance(found, SpecIssue) else _gpu_issue(
                spec, phase, model, found, gpu_path=path, tp_path=path)
            if issue is not None:
                issues.append(issue)
    return issues


def _no_fit_message(spec: DeploymentSpec, phase: Phase, model: ModelFacts, gpu: GPU,
                    mem: MemoryFit) -> str:
    larger = [tp for tp in model.valid_tps(gpu.max_gpus_per_node) if tp > mem.tp]
    fitting = [tp for tp in larger if phase_fit(spec, phase, model, gpu, tp=tp).fits]
    if fitting:
        advice = f"the smallest TP that fits is {fitting[0]}"
    else:
        advice = (f"it does not fit at any TP up to {gpu.max_gpus_per_node} either; use a "
                  "larger GPU, fp8 weights/KV, or pipeline parallelism")
    return f"{model.name} does not fit: {mem.explain()}; {advice}"
