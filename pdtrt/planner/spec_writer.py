"""The planner's output spec: a commented ``pdtrt.yaml`` for the chosen configuration.

A spec always describes a disaggregated deployment (a prefill pool and a decode pool). When
the verdict is "do not disaggregate", the planner still writes the best disaggregated
configuration that met the SLOs, with the verdict at the top of the file, so the trade-off is
there to build and measure; with none, it refuses (:class:`NoFeasiblePlanError`).

Engines take the workload's longest prompt (a chat's last turn, history included). A chat
workload (shared prefix or turns) gets what the plan simulated: ``engine.enable_block_reuse``
on both pools and ``router.routing: kv_aware`` -- with a warning in the header, as block reuse
in disaggregated serving can hang a transfer (TensorRT-LLM #12542). Conditional disaggregation's
``router.max_local_prefill_tokens`` and ``max_prefill_queue_depth`` are the plan's sweep
(:mod:`pdtrt.planner.reuse`) when it chose them above 0. With owned cards (``--have``) each
pool's ``price_per_hour_usd`` is its blended GPU-hour (owned cards at their power, the rest
rented) and the header says which cards are owned and which to rent. A mixed decode pool
(:mod:`pdtrt.planner.mixed`) is written as decode ``endpoints`` of two GPU types -- each
another server, the second naming its ``gpu`` -- with ``router.routing: kv_capacity``.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pdtrt.enums import KVDType, ServingMode, Target, WeightQuant
from pdtrt.errors import NoFeasiblePlanError
from pdtrt.perf.hardware import Instance
from pdtrt.planner.search import Plan, PlanCandidate
from pdtrt.spec.load import load_deployment
from pdtrt.yamlio import write_atomic

__all__ = ["NoFeasiblePlanError", "spec_candidate", "spec_text", "write_spec"]


def spec_candidate(p: Plan) -> PlanCandidate:
    """The candidate the spec describes: the chosen one if disaggregated, else the best
    disaggregated one that met the SLOs."""
    best = p.best(ServingMode.DISAGGREGATED)
    if best is None:
        raise NoFeasiblePlanError(
            f"no disaggregated configuration meets the SLOs, so there is no spec to write; "
            f"verdict: {p.verdict}",
            hint="relax --ttft-p90 / --itl-p90, raise --max-gpus / --budget, or add GPU types")
    return best


def _target(weights: WeightQuant, kv_dtype: KVDType) -> Target:
    """trtllm-1.2 (the current stack, the default for GPUs) unless the weights or the KV dtype
    need trtllm-0.21's engine builds (weight-only INT8/INT4, AWQ, an INT8 KV cache)."""
    if weights in (WeightQuant.NONE, WeightQuant.FP8) and kv_dtype is not KVDType.INT8:
        return Target.TRTLLM_1_2
    return Target.TRTLLM_0_21


def _pool(inst: Instance, instances: int, isl: int, seq_len: int,
          reuse: bool, price: float | None) -> dict[str, object]:
    engine: dict[str, object] = {
        "max_batch_size": inst.max_batch_size, "max_num_tokens": inst.max_num_tokens,
        "max_input_len": isl, "max_seq_len": seq_len, "tokens_per_block": inst.tokens_per_block,
        "kv_cache_free_gpu_mem_fraction": inst.kv_cache_fraction}
    if reuse:
        engine["enable_block_reuse"] = True
    return {"gpu": inst.gpu.key, "tp": inst.tp, "instances": instances,
            "price_per_hour_usd": price, "engine": engine}


def _router(p: Plan) -> dict[str, object]:
    """The router settings the plan simulated (empty: the defaults)."""
    router: dict[str, object] = {}
    if p.request.shape.reuses:
        router["routing"] = "kv_aware"
    if p.local_prefill is not None and p.local_prefill.chosen:
        router["max_local_prefill_tokens"] = p.local_prefill.chosen
    if p.local_prefill is not None and p.local_prefill.chosen_queue_depth:
        router["max_prefill_queue_depth"] = p.local_prefill.chosen_queue_depth
    return router


def _mixed_price(cand: PlanCandidate) -> float:
    """A mixed decode pool's blended GPU-hour, every card rented."""
    c = cand.config
    assert c.decode is not None
    pools = [(c.decode, c.decode_instances), *cand.extra_decode]
    cost = sum(inst.price_per_hour_usd() * n for inst, n in pools)
    return round(cost / sum(inst.num_gpus * n for inst, n in pools), 4)


def _mixed_decode(decode: dict[str, object], cand: PlanCandidate) -> dict[str, object]:
    """The decode pool of a mixed candidate: one endpoint per GPU type (another server, its
    ``gpu`` named where it is not the pool's), the engine's batch limit the larger type's
    (each engine's KV cache bounds its own batch; kv_capacity routing keeps it within)."""
    c = cand.config
    assert c.decode is not None
    pools = [(c.decode, c.decode_instances), *cand.extra_decode]
    engine = decode["engine"]
    assert isinstance(engine, dict)
    endpoints = [{"url": f"decode-{inst.gpu.key}-host:8001", "instances": n,
                  **({"gpu": inst.gpu.key} if inst.gpu.key != c.decode.gpu.key else {})}
                 for inst, n in pools]
    return {**decode, "engine": {**engine, "max_batch_size": max(
        inst.max_batch_size for inst, _ in pools)}, "endpoints": endpoints}


def spec_text(p: Plan, *, model_name: str, model_path: str | None = None) -> str:
    """YAML text of the spec for :func:`spec_candidate` (validated by the caller)."""
    cand = spec_candidate(p)
    req, c = p.request, cand.config
    assert c.decode is not None and c.link is not None
    name = re.sub(r"[^a-z0-9._-]+", "-", model_name.split("/")[-1].lower()).strip("-")
    name = f"{name}-{c.prefill.gpu.key}-{c.decode.gpu.key}"[:64]
    shape = req.shape
    isl, reuse = shape.longest_prompt, shape.reuses
    seq = isl + req.osl
    model: dict[str, object] = {"name": model_name}
    if model_path:
        model["path"] = model_path
    model.update({"dtype": str(c.prefill.dtype),
                  "weights": str(req.weights if req.weights is not WeightQuant.NONE else "none"),
                  "kv_cache_dtype": str(req.kv_dtype)})
    same_node = req.same_node
    target = _target(req.weights, req.kv_dtype)
    use = cand.fleet_use

    def price(phase: str, inst: Instance) -> float | None:
        if use is None:
            return inst.gpu.price_per_hour_usd
        return round(use.usd_per_gpu_hour(phase), 4)

    mixed = cand.extra_decode
    decode = _pool(c.decode, c.decode_instances, isl, seq, reuse,
                   _mixed_price(cand) if mixed and use is None else price("decode", c.decode))
    two_hosts = target is Target.TRTLLM_1_2 and c.decode.gpu.key != c.prefill.gpu.key
    if mixed:  # every decode endpoint is a server on its own GPU type
        decode = _mixed_decode(decode, cand)
    elif two_hosts:  # trtllm-1.2 serves a pool on another GPU type from its own host's server
        decode = {**decode, "endpoint": f"{c.decode.gpu.key}-host:8001"}
    two_hosts = two_hosts or bool(mixed)
    spec = {
        "version": 1, "name": name, "target": str(target), "model": model,
        "prefill": _pool(c.prefill, c.prefill_instances, isl, seq, reuse,
                         price("prefill", c.prefill)),
        "decode": decode,
        "kv_transfer": {"backend": "ucx",
                        "transports": ["sm", "cuda_ipc", "cuda_copy"] if same_node
                        else ["rc", "cuda_copy", "tcp"]},
        "slo": req.slo.to_dict(),
        "workload": {"isl": req.isl, "osl": req.osl, "request_rate_per_s": req.rate_per_s},
    }
    if router := {**_router(p), **({"routing": "kv_capacity"} if mixed else {})}:
        spec = {**spec, "router": router}
    if two_hosts:  # the other host's router calls this server, and it calls the decode host's
        spec = {**spec, "serving": {"host": "0.0.0.0"}}
    chosen = p.chosen
    header = [
        "# Written by `pdtrt plan`; check it with `pdtrt spec validate`.",
        f"# verdict: {p.verdict}",
        f"# this spec: {cand.label()} -- ${cand.cost_per_hour_usd:.2f}/h, goodput "
        f"{cand.goodput_req_per_s:.2f} req/s at {req.rate_per_s:g} req/s (simulated)",
    ]
    if use is not None:
        header.append(f"# owned and rented cards: {use.describe()}; price_per_hour_usd is "
                      "each pool's blended GPU-hour (owned cards at their board power)")
    if chosen is not None and chosen is not cand:
        header.append(f"# the overall best is {chosen.label()} (aggregated serving, "
                      "which this disaggregated spec format does not describe)")
    if mixed:
        header.append("# decode.endpoints: a mixed decode pool, routed by KV capacity "
                      "(router.routing: kv_capacity); set each decode host's address -- each "
                      "serves `pdtrt repo SPEC --mode pools` (docs/repo.md) on its GPU type")
    elif two_hosts:
        header.append(f"# decode.endpoint: set the {c.decode.gpu.key} host's address; it serves "
                      "`pdtrt repo SPEC --mode pools` (docs/repo.md)")
    if reuse:
        followup = f" --followup-isl {shape.followup_isl}" if shape.followup_isl else ""
        header.append(f"# simulate it as planned: pdtrt simulate THIS_FILE --mode disaggregated "
                      f"--turns {shape.turns} --shared-prefix {shape.shared_prefix}{followup} "
                      f"--think-s {shape.think_s:g} --rate {req.rate_per_s / shape.turns:.6g} "
                      f"--num-requests {req.sim_requests} --seed {req.seed} (its --rate starts "
                      f"conversations: {req.rate_per_s:g} requests/s)")
        header.append(f"# chat workload ({shape.turns} turns, shared prefix {shape.shared_prefix}"
                      " tokens): block reuse on and kv_aware routing, as simulated; on GPUs a "
                      "block evicted before its asynchronous send ended hangs the transfer "
                      "(TensorRT-LLM #12542): turn reuse off (routing least_load) where that "
                      "bites")
    if p.local_prefill is not None:
        header.append(f"# conditional disaggregation: {p.local_prefill.why}")
    header += [f"#   {r}" for r in cand.reasons()]
    return "\n".join(header) + "\n" + yaml.safe_dump(spec, sort_keys=False)


def write_spec(p: Plan, path: Path) -> PlanCandidate:
    """Write :func:`spec_text` to ``path`` (atomically) and check that it validates as a spec
    with the request's catalog; returns the candidate it describes. Raises
    NoFeasiblePlanError (no disaggregated candidate) or SpecError (a bug: it must validate)."""
    req = p.request
    text = spec_text(p, model_name=req.model.name,
                     model_path=str(req.model_path) if req.model_path else None)
    write_atomic(path, text)
    load_deployment(path, catalog=req.catalog)
    return spec_candidate(p)
