"""``pdtrt plan``: the best goodput per dollar that meets the SLOs, and an honest verdict.

1. Enumerate the space (:mod:`pdtrt.planner.space`).
2. Screen every point with the analytical operating point at the target rate: stable, and
   p90 TTFT / ITL within ``SCREEN_SLACK`` of the targets (the screen is deliberately a little
   loose; the simulation decides).
3. Verify survivors of each mode, cheapest first, by discrete-event simulation
   (:mod:`pdtrt.sim`) at the target rate until ``verify_per_mode`` meet the SLOs or
   ``max_sims_per_mode`` were tried; only configurations whose simulated percentiles meet
   the SLOs are returned as feasible.
4. Rank the feasible ones by goodput (SLO-meeting requests/s) per dollar-hour; the verdict
   compares the best aggregated with the best disaggregated and says why the loser lost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.enums import KVDType, ServingMode, WeightQuant
from pdtrt.facts.catalog import GPU
from pdtrt.facts.model import ModelFacts
from pdtrt.perf.estimate import ServingConfig, operating_point
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.point import OperatingPoint
from pdtrt.planner.space import SearchBounds, candidate_configs
from pdtrt.sim.config import SimConfig, SloTarget
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.simulator import simulate
from pdtrt.sim.workload import ArrivalKind, LengthDist, Workload

__all__ = ["Plan", "PlanCandidate", "PlanRequest", "plan"]

SCREEN_SLACK = 1.15


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    model: ModelFacts
    gpus: tuple[GPU, ...]
    isl: int
    osl: int
    rate_per_s: float
    slo: SloTarget
    factors: EfficiencyFactors
    weights: WeightQuant = WeightQuant.NONE
    kv_dtype: KVDType = KVDType.FP8
    bounds: SearchBounds = SearchBounds()
    same_node: bool = False
    num_requests: int = 300
    seed: int = 0
    verify_per_mode: int = 3
    max_sims_per_mode: int = 8


@dataclass(frozen=True, kw_only=True)
class PlanCandidate:
    config: ServingConfig
    point: OperatingPoint
    screen_ok: bool
    sim: SimResult | None = None
    rate_per_s: float
    osl: int
    slo: SloTarget

    @property
    def meets_slo(self) -> bool:
        return self.sim is not None and self.sim.slo_met

    @property
    def cost_per_hour_usd(self) -> float:
        return self.config.cost_per_hour_usd()

    @property
    def goodput_req_per_s(self) -> float:
        return self.sim.goodput_req_per_s if self.sim is not None else 0.0

    @property
    def goodput_per_usd_hour(self) -> float:
        cost = self.cost_per_hour_usd
        return self.goodput_req_per_s / cost if cost else 0.0

    @property
    def user_tok_per_s(self) -> float:
        tpot = self.sim.tpot.mean if self.sim is not None else self.point.tpot_s
        return 1.0 / tpot if tpot and math.isfinite(tpot) else 0.0

    @property
    def tok_per_s_per_usd_hour(self) -> float:
        if not self.point.stable or not self.cost_per_hour_usd:
            return 0.0
        return self.rate_per_s * self.osl / self.cost_per_hour_usd

    def _p90_ms(self, which: str) -> float:
        if self.sim is not None:
            return self.sim.percentile_ms(which)
        s = self.point.ttft_p90_s if which == "ttft" else self.point.itl_p90_s
        return s * 1e3

    def reasons(self) -> list[str]:
        p, c = self.point, self.config
        out = []
        if not p.stable:
            return [f"cannot sustain {self.rate_per_s:g} req/s: {p.bottleneck}"]
        if c.mode is ServingMode.AGGREGATED:
            out.append(f"prefill {p.prefill_util:.0%} of engine time, decode batch "
                       f"{p.decode_batch:.0f}/{p.max_decode_batch}; prefill chunks stretch "
                       f"decode steps from {p.decode_step_s * 1e3:.1f} ms")
        else:
            assert c.link is not None
            out.append(f"prefill {p.prefill_util:.0%} busy, decode batch "
                       f"{p.decode_batch:.0f}/{p.max_decode_batch} at "
                       f"{p.decode_step_s * 1e3:.1f} ms/step, KV {p.kv_transfer_s * 1e3:.1f} ms "
                       f"over {c.link.name} ({p.link_util:.0%} busy)")
        out.append(f"bottleneck: {p.bottleneck}")
        for which, target in (("ttft", self.slo.ttft_ms), ("itl", self.slo.itl_ms)):
            if target is None:
                continue
            value = self._p90_ms(which)
            verb = "headroom" if value <= target else "MISSES"
            out.append(f"{which.upper()} p{self.slo.percentile} {value:.0f}/{target:g} ms "
                       f"({verb} {abs(1 - value / target):.0%})")
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "config": self.config.label(), "mode": str(self.config.mode),
            "num_gpus": self.config.num_gpus,
            "cost_per_hour_usd": round(self.cost_per_hour_usd, 4),
            "screen_ok": self.screen_ok, "simulated": self.sim is not None,
            "meets_slo": self.meets_slo,
            "goodput_req_per_s": round(self.goodput_req_per_s, 4),
            "goodput_per_usd_hour": round(self.goodput_per_usd_hour, 5),
            "ttft_p90_ms": round(self._p90_ms("ttft"), 2) if self.point.stable else None,
            "itl_p90_ms": round(self._p90_ms("itl"), 2) if self.point.stable else None,
            "user_tok_per_s": round(self.user_tok_per_s, 2),
            "reasons": self.reasons(),
            "simulation": self.sim.to_dict() if self.sim is not None else None,
        }


@dataclass(frozen=True, kw_only=True)
class Plan:
    request: PlanRequest
    candidates: tuple[PlanCandidate, ...]
    ranked: tuple[PlanCandidate, ...]
    verdict: str

    @property
    def chosen(self) -> PlanCandidate | None:
        return self.ranked[0] if self.ranked else None

    def best(self, mode: ServingMode) -> PlanCandidate | None:
        return next((c for c in self.ranked if c.config.mode is mode), None)

    @property
    def simulated(self) -> tuple[PlanCandidate, ...]:
        return tuple(c for c in self.candidates if c.sim is not None)


def _screen(p: OperatingPoint, slo: SloTarget) -> bool:
    if not p.stable:
        return False
    if slo.ttft_ms is not None and p.ttft_p90_s * 1e3 > slo.ttft_ms * SCREEN_SLACK:
        return False
    if slo.itl_ms is not None and p.itl_p90_s * 1e3 > slo.itl_ms * SCREEN_SLACK:
        return False
    return True


def _sim(req: PlanRequest, config: ServingConfig) -> SimResult:
    workload = Workload(arrivals=ArrivalKind.POISSON, rate_per_s=req.rate_per_s,
                        isl=LengthDist(mean=req.isl), osl=LengthDist(mean=req.osl))
    return simulate(SimConfig(serving=config, factors_prefill=req.factors,
                              factors_decode=req.factors, workload=workload,
                              num_requests=req.num_requests, seed=req.seed, slo=req.slo))


def _verdict(ranked: list[PlanCandidate], screened: list[PlanCandidate],
             everything: list[PlanCandidate], req: PlanRequest) -> str:
    agg = next((c for c in ranked if c.config.mode is ServingMode.AGGREGATED), None)
    dis = next((c for c in ranked if c.config.mode is ServingMode.DISAGGREGATED), None)
    if not everything:
        gpus = ", ".join(g.key for g in req.gpus)
        weights = "bf16" if req.weights is WeightQuant.NONE else str(req.weights)
        return (f"no configuration to evaluate: no way to serve {req.model.name} ({weights} "
                f"weights, {req.kv_dtype} KV cache) on {gpus} at {req.rate_per_s:g} req/s "
                "fits in memory and within the GPU / budget bounds (FP8 also needs an "
                "FP8-capable GPU: try --kv-dtype bf16, a larger --max-gpus / --budget, or "
                "another GPU)")
    if agg is None and dis is None:
        closest = min(everything, key=lambda c: c.cost_per_hour_usd, default=None)
        why = "; ".join(closest.reasons()) if closest else "no configuration fits in memory"
        return (f"nothing within the bounds meets the SLOs at {req.rate_per_s:g} req/s "
                f"(cheapest tried, {closest.config.label() if closest else '-'}: {why})")

    def per_usd(c: PlanCandidate) -> str:
        return f"{c.goodput_per_usd_hour:.3f} req/s per $/h"

    if dis is not None and (agg is None or dis.goodput_per_usd_hour > agg.goodput_per_usd_hour):
        if agg is None:
            return (f"disaggregate: {dis.config.label()} meets the SLOs ({per_usd(dis)}); no "
                    "aggregated configuration within the bounds does")
        gain = dis.goodput_per_usd_hour / agg.goodput_per_usd_hour - 1
        return (f"disaggregate: {dis.config.label()} gives {per_usd(dis)} vs {per_usd(agg)} "
                f"for {agg.config.label()} (+{gain:.0%} goodput per dollar)")
    assert agg is not None
    if dis is None:
        tried = [c for c in everything if c.config.mode is ServingMode.DISAGGREGATED]
        sim_fail = [c for c in tried if c.sim is not None]
        example = min(sim_fail or tried, key=lambda c: c.cost_per_hour_usd, default=None)
        why = "; ".join(example.reasons()) if example else "no disaggregated configuration fits"
        return (f"do not disaggregate: {agg.config.label()} meets the SLOs ({per_usd(agg)}) "
                f"and no disaggregated configuration within the bounds does (cheapest, "
                f"{example.config.label() if example else '-'}: {why})")
    loss = 1 - dis.goodput_per_usd_hour / agg.goodput_per_usd_hour
    return (f"do not disaggregate: {agg.config.label()} gives {per_usd(agg)} vs {per_usd(dis)} "
            f"for the best disaggregated {dis.config.label()} ({loss:.0%} less goodput per "
            f"dollar: ${dis.cost_per_hour_usd:.2f}/h vs ${agg.cost_per_hour_usd:.2f}/h for "
            "the same load)")


def plan(req: PlanRequest) -> Plan:
    """Search, screen, verify and rank (see module doc)."""
    everything: list[PlanCandidate] = []
    for config in candidate_configs(
            req.model, req.gpus, req.factors, isl=req.isl, osl=req.osl,
            rate_per_s=req.rate_per_s, weights=req.weights, kv_dtype=req.kv_dtype,
            bounds=req.bounds, same_node=req.same_node,
            itl_target_s=req.slo.itl_ms / 1e3 if req.slo.itl_ms else None):
        p = operating_point(config, req.factors, req.factors, isl=req.isl, osl=req.osl,
                            rate_per_s=req.rate_per_s)
        everything.append(PlanCandidate(config=config, point=p, screen_ok=_screen(p, req.slo),
                                        rate_per_s=req.rate_per_s, osl=req.osl, slo=req.slo))
    screened = [c for c in everything if c.screen_ok]
    by_index: dict[int, PlanCandidate] = {}
    for mode in ServingMode:
        mine = sorted((i for i, c in enumerate(everything)
                       if c.screen_ok and c.config.mode is mode),
                      key=lambda i: (everything[i].cost_per_hour_usd,
                                     everything[i].point.ttft_p90_s))
        met = 0
        for i in mine[: req.max_sims_per_mode]:
            c = everything[i]
            by_index[i] = PlanCandidate(config=c.config, point=c.point, screen_ok=True,
                                        sim=_sim(req, c.config), rate_per_s=c.rate_per_s,
                                        osl=c.osl, slo=c.slo)
            met += by_index[i].meets_slo
            if met >= req.verify_per_mode:
                break
    everything = [by_index.get(i, c) for i, c in enumerate(everything)]
    ranked = sorted((c for c in everything if c.meets_slo),
                    key=lambda c: (-c.goodput_per_usd_hour, c.cost_per_hour_usd,
                                   c.config.label()))
    return Plan(request=req, candidates=tuple(everything), ranked=tuple(ranked),
                verdict=_verdict(ranked, screened, everything, req))
