"""Simulation runs from a deployment spec: the spec's disaggregated deployment and its
aggregated baseline, with the spec's workload and SLO unless overridden.

The router's ``routing``, ``max_local_prefill_tokens`` and ``max_prefill_queue_depth`` come
from the spec's ``router`` section unless overridden (the last two apply to the disaggregated
deployment only), so a spec ``pdtrt plan`` wrote is simulated as the plan simulated it.

The spec's ``workload.isl`` / ``osl`` are fixed lengths (the ``N`` form of
:func:`pdtrt.workload.parse_length`); ``--isl`` / ``--osl`` may be any form. A trace given
without ``--rate`` / ``--concurrency`` is replayed at its own times when its entries carry
``arrival_s``; otherwise it supplies lengths and the load comes from the flags or the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.enums import Percentile, Routing, ServingBackend, ServingMode
from pdtrt.errors import PdtrtError
from pdtrt.perf.configs import aggregated_baseline, serving_from_deployment
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import load_factors
from pdtrt.perf.scheduling import CapacityPolicy
from pdtrt.sim.config import SimConfig
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.workload import SimWorkload
from pdtrt.workload.arrivals import ArrivalProcess, LoopKind
from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.slo import SLO
from pdtrt.workload.trace import read_trace

__all__ = ["ROUTING", "SimOverrides", "sim_configs", "spec_slo"]

# the router's routings (spec router.routing) as the simulator's policies
# (kv-capacity: the decode pool's routing; the entry pool is least-loaded, SimState.choose)
ROUTING = {Routing.LEAST_LOAD: RoutingPolicy.LEAST_LOADED,
           Routing.ROUND_ROBIN: RoutingPolicy.ROUND_ROBIN, Routing.KV_AWARE: RoutingPolicy.KV_AWARE,
           Routing.KV_CAPACITY: RoutingPolicy.KV_CAPACITY}


@dataclass(frozen=True, kw_only=True)
class SimOverrides:
    """What the command line changes relative to the spec (None keeps the spec's value)."""

    modes: tuple[ServingMode, ...] = (ServingMode.AGGREGATED, ServingMode.DISAGGREGATED)
    rate_per_s: float | None = None
    concurrency: int | None = None
    process: ArrivalProcess = ArrivalProcess.POISSON
    trace: Path | None = None
    isl: LengthDist | None = None
    osl: LengthDist | None = None
    num_requests: int = 500
    seed: int = 0
    agg_instances: int | None = None
    prefill_instances: int | None = None
    decode_instances: int | None = None
    batch_policy: BatchPolicy = BatchPolicy.CHUNKED
    routing: RoutingPolicy | None = None
    backend: ServingBackend = ServingBackend.TRTLLM
    factors_file: Path | None = None
    shared_prefix: int = 0
    turns: int = 1
    think_s: float = 0.0
    followup_isl: LengthDist | None = None
    max_local_prefill_tokens: int | None = None
    max_prefill_queue_depth: float | None = None
    capacity_policy: CapacityPolicy = CapacityPolicy.GUARANTEED_NO_EVICT


def _workload(dep: Deployment, o: SimOverrides) -> SimWorkload:
    wl = dep.spec.workload
    trace = read_trace(o.trace) if o.trace else ()
    isl = o.isl or LengthDist.fixed(wl.isl)
    osl = o.osl or LengthDist.fixed(wl.osl)
    if trace and trace[0].arrival_s is not None and o.rate_per_s is None \
            and o.concurrency is None:
        return SimWorkload(isl=isl, osl=osl, trace=trace,  # replayed at its own times
                           shared_prefix=o.shared_prefix, turns=o.turns, think_s=o.think_s,
                           followup_isl=o.followup_isl)
    rate = o.rate_per_s if o.rate_per_s is not None else (
        None if o.concurrency is not None else wl.request_rate_per_s)
    conc = o.concurrency if o.concurrency is not None else (
        None if o.rate_per_s is not None else wl.concurrency)
    if rate is None and conc is None:
        raise PdtrtError("the spec's workload has neither request_rate_per_s nor concurrency",
                         hint="pass --rate R or --concurrency C")
    return SimWorkload(isl=isl, osl=osl, loop=LoopKind.OPEN if rate else LoopKind.CLOSED,
                       process=o.process, rate_per_s=rate, concurrency=conc, trace=trace,
                       shared_prefix=o.shared_prefix, turns=o.turns, think_s=o.think_s,
                       followup_isl=o.followup_isl)


def spec_slo(dep: Deployment) -> SLO:
    """The spec's ``slo`` section as the shared SLO type."""
    s = dep.spec.slo
    return SLO(percentile=Percentile(s.percentile), ttft_ms=s.ttft_ms, itl_ms=s.itl_ms)


def sim_configs(dep: Deployment, o: SimOverrides) -> list[SimConfig]:
    """One :class:`SimConfig` per requested mode, in ``o.modes`` order."""
    f = load_factors(o.backend, o.factors_file)
    workload = _workload(dep, o)
    router = dep.spec.router
    routing = o.routing or ROUTING[router.routing]
    local = (router.max_local_prefill_tokens if o.max_local_prefill_tokens is None
             else o.max_local_prefill_tokens)
    depth = (router.max_prefill_queue_depth if o.max_prefill_queue_depth is None
             else o.max_prefill_queue_depth)
    out = []
    for mode in o.modes:
        serving: ServingConfig
        if mode is ServingMode.AGGREGATED:
            serving = aggregated_baseline(dep, instances=o.agg_instances)
        else:
            serving = serving_from_deployment(dep)
            serving = replace(serving,
                              prefill_instances=o.prefill_instances or serving.prefill_instances,
                              decode_instances=o.decode_instances or serving.decode_instances)
        serving = replace(serving, prefill=replace(serving.prefill,
                                                   capacity_policy=o.capacity_policy),
                          decode=serving.decode and replace(serving.decode,
                                                            capacity_policy=o.capacity_policy))
        out.append(SimConfig(serving=serving, factors_prefill=f, factors_decode=f,
                             workload=workload, num_requests=o.num_requests, seed=o.seed,
                             batch_policy=o.batch_policy, routing=routing,
                             slo=spec_slo(dep), decode_routing=(
                                 routing if routing is RoutingPolicy.KV_CAPACITY
                                 else RoutingPolicy.LEAST_LOADED),
                             **({"max_local_prefill_tokens": local,
                                 "max_prefill_queue_depth": depth}
                                if mode is ServingMode.DISAGGREGATED else {})))
    return out
