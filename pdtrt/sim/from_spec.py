"""Simulation runs from a deployment spec: the spec's disaggregated deployment and its
aggregated baseline, with the spec's workload and SLO unless overridden."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pdtrt.enums import ServingBackend, ServingMode
from pdtrt.errors import PdtrtError
from pdtrt.perf.configs import aggregated_baseline, serving_from_deployment
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import load_factors
from pdtrt.sim.config import SimConfig, SloTarget
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.workload import ArrivalKind, LengthDist, LengthKind, Workload, read_trace
from pdtrt.spec.deployment import Deployment

__all__ = ["SimOverrides", "sim_configs"]


@dataclass(frozen=True, kw_only=True)
class SimOverrides:
    """What the command line changes relative to the spec (None keeps the spec's value)."""

    modes: tuple[ServingMode, ...] = (ServingMode.AGGREGATED, ServingMode.DISAGGREGATED)
    rate_per_s: float | None = None
    concurrency: int | None = None
    arrivals: ArrivalKind | None = None
    trace: Path | None = None
    isl: int | None = None
    osl: int | None = None
    length_kind: LengthKind = LengthKind.FIXED
    length_spread: float = 0.0
    num_requests: int = 500
    seed: int = 0
    agg_instances: int | None = None
    prefill_instances: int | None = None
    decode_instances: int | None = None
    batch_policy: BatchPolicy = BatchPolicy.CHUNKED
    routing: RoutingPolicy = RoutingPolicy.LEAST_LOADED
    backend: ServingBackend = ServingBackend.TRTLLM
    factors_file: Path | None = None


def _workload(dep: Deployment, o: SimOverrides) -> Workload:
    wl = dep.spec.workload
    rate = o.rate_per_s if o.rate_per_s is not None else (
        None if o.concurrency is not None else wl.request_rate_per_s)
    conc = o.concurrency if o.concurrency is not None else (
        None if o.rate_per_s is not None else wl.concurrency)
    arrivals = o.arrivals or (ArrivalKind.TRACE if o.trace else
                              ArrivalKind.POISSON if rate else ArrivalKind.CLOSED)
    if arrivals is ArrivalKind.TRACE and o.trace is None:
        raise PdtrtError("--arrivals trace needs --trace FILE")
    if arrivals is not ArrivalKind.TRACE and rate is None and conc is None:
        raise PdtrtError("the spec's workload has neither request_rate_per_s nor concurrency",
                         hint="pass --rate R or --concurrency C")
    return Workload(
        arrivals=arrivals, rate_per_s=rate, concurrency=conc,
        isl=LengthDist(kind=o.length_kind, mean=o.isl or wl.isl, spread=o.length_spread),
        osl=LengthDist(kind=o.length_kind, mean=o.osl or wl.osl, spread=o.length_spread),
        trace=read_trace(o.trace) if o.trace else ())


def sim_configs(dep: Deployment, o: SimOverrides) -> list[SimConfig]:
    """One :class:`SimConfig` per requested mode, in ``o.modes`` order."""
    f = load_factors(o.backend, o.factors_file)
    slo = SloTarget(percentile=dep.spec.slo.percentile, ttft_ms=dep.spec.slo.ttft_ms,
                    itl_ms=dep.spec.slo.itl_ms)
    workload = _workload(dep, o)
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
        out.append(SimConfig(serving=serving, factors_prefill=f, factors_decode=f,
                             workload=workload, num_requests=o.num_requests, seed=o.seed,
                             batch_policy=o.batch_policy, routing=o.routing, slo=slo))
    return out
