"""``pdtrt plan``: the best goodput per dollar that meets the SLOs, and an honest verdict.

1. Enumerate the space (:mod:`pdtrt.planner.space`).
2. Screen every point with the analytical operating point at the target rate: stable, and
   p90 TTFT / TPOT within ``SCREEN_SLACK`` of the targets (:func:`~pdtrt.planner.candidate.
   screen`; deliberately a little loose, the simulation decides).
3. Verify survivors of each mode, cheapest first, by discrete-event simulation
   (:mod:`pdtrt.sim`) at the target rate until ``verify_per_mode`` meet the SLOs or
   ``max_sims_per_mode`` were tried; only configurations whose simulation meets the SLO --
   :func:`pdtrt.workload.evaluate_slo`, the definition ``pdtrt bench`` uses -- are feasible.
4. Rank the feasible ones by goodput (SLO-meeting requests/s) per dollar-hour; the verdict
   compares the best aggregated with the best disaggregated and says why the loser lost.
5. With owned cards (``--have``, :mod:`pdtrt.planner.fleet`) costs are the fleet's (owned cards
   at their power, the rest rented) and the same request is planned again with every card
   rented (``Plan.without_owned``), so the plan states what the owned cards save.
6. Follow-ups (:mod:`pdtrt.planner.reuse`): on a chat workload, the chosen configuration
   again with ``least_load`` routing (what the KV-aware router buys); for the best
   disaggregated one, conditional disaggregation's ``max_local_prefill_tokens``.

A chat workload (``--shared-prefix``, ``--turns``) enumerates engines for its longest prompt,
sizes and screens prefill pools by the tokens block reuse leaves to compute
(:class:`pdtrt.workload.ConversationShape`: an ideal, nothing evicted -- looser than the
truth, which the kv_aware simulation then measures) and decode pools at its mean context.

The result is typed (:class:`Plan`) with its JSON form; rendering is the CLI's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdtrt.enums import ServingMode, WeightQuant
from pdtrt.perf.estimate import ServingConfig, operating_point
from pdtrt.perf.hardware import Instance
from pdtrt.perf.point import OperatingPoint
from pdtrt.planner.candidate import PlanCandidate, screen
from pdtrt.planner.mixed import ExtraDecode, mixed_configs, mixed_point
from pdtrt.planner.request import PlanRequest
from pdtrt.planner.reuse import (
    LocalPrefillSweep,
    RoutingComparison,
    compare_routing,
    sweep_local_prefill,
)
from pdtrt.planner.space import candidate_configs
from pdtrt.sim.config import SimConfig
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.simulator import simulate

__all__ = ["Plan", "PlanCandidate", "PlanRequest", "plan"]


@dataclass(frozen=True, kw_only=True)
class Plan:
    request: PlanRequest
    candidates: tuple[PlanCandidate, ...]
    ranked: tuple[PlanCandidate, ...]
    verdict: str
    routing: RoutingComparison | None = None  # chat workloads: kv_aware vs least_load
    local_prefill: LocalPrefillSweep | None = None  # for the best disaggregated candidate
    without_owned: Plan | None = None  # with --have: the same request, every card rented

    @property
    def chosen(self) -> PlanCandidate | None:
        return self.ranked[0] if self.ranked else None

    def best(self, mode: ServingMode) -> PlanCandidate | None:
        return next((c for c in self.ranked if c.config.mode is mode), None)

    @property
    def simulated(self) -> tuple[PlanCandidate, ...]:
        return tuple(c for c in self.candidates if c.sim is not None)

    @property
    def num_screened(self) -> int:
        return sum(c.screen_ok for c in self.candidates)

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict, "slo": self.request.slo.to_dict(),
            "chosen": self.chosen.to_dict() if self.chosen else None,
            "ranked": [c.to_dict() for c in self.ranked],
            "num_candidates": len(self.candidates), "num_screened": self.num_screened,
            "num_simulated": len(self.simulated),
            "routing": self.routing.to_dict() if self.routing else None,
            "local_prefill": self.local_prefill.to_dict() if self.local_prefill else None,
            **({"owned": self.owned_summary()} if self.request.fleet is not None else {}),
            **({"mixed_decode": self.mixed_summary()}
               if any(c.extra_decode for c in self.candidates) else {}),
        }

    def mixed_summary(self) -> dict[str, object]:
        """The best mixed decode pool that met the SLOs against the best single-type
        disaggregated one: configurations, cost per hour and per million output tokens, and
        whether the mixed pool is the cheaper per SLO-meeting request (None: one is missing)."""
        dis = [c for c in self.ranked if c.config.mode is ServingMode.DISAGGREGATED]
        mixed = next((c for c in dis if c.extra_decode), None)
        pure = next((c for c in dis if not c.extra_decode), None)

        def describe(c: PlanCandidate | None) -> dict[str, object] | None:
            if c is None:
                return None
            mtok = c.usd_per_mtok()
            return {"config": c.label(), "cost_per_hour_usd": round(c.cost_per_hour_usd, 4),
                    "usd_per_mtok": None if mtok is None else round(mtok, 4),
                    "goodput_per_usd_hour": round(c.goodput_per_usd_hour, 5)}

        pays = None if mixed is None or pure is None else \
            mixed.goodput_per_usd_hour > pure.goodput_per_usd_hour
        return {"mixed": describe(mixed), "single_type": describe(pure), "mixed_pays": pays}

    def owned_summary(self) -> dict[str, object]:
        """With --have: the chosen configuration's cards (owned / rented per phase) and the
        cost per million output tokens with the owned cards and without them (every card
        rented: the best plan of :attr:`without_owned`)."""
        chosen = self.chosen
        rented = self.without_owned.chosen if self.without_owned else None

        def mtok(c: PlanCandidate | None) -> float | None:
            value = c.usd_per_mtok() if c is not None else None
            return None if value is None else round(value, 4)

        return {
            "use": chosen.fleet_use.to_dict() if chosen and chosen.fleet_use else None,
            "usd_per_mtok": mtok(chosen),
            "rented_config": rented.label() if rented else None,
            "rented_usd_per_mtok": mtok(rented),
        }


def _sim_config(req: PlanRequest, config: ServingConfig,
                extra_decode: ExtraDecode = ()) -> SimConfig:
    """How ``config`` is simulated (with ``extra_decode``: a mixed decode pool, routed by KV
    capacity)."""
    return SimConfig(serving=config, factors_prefill=req.factors, factors_decode=req.factors,
                     workload=req.workload, num_requests=req.sim_requests, seed=req.seed,
                     slo=req.slo, routing=req.routing, extra_decode=extra_decode,
                     decode_routing=RoutingPolicy.KV_CAPACITY if extra_decode
                     else RoutingPolicy.LEAST_LOADED)


def _sim(req: PlanRequest, c: PlanCandidate) -> SimResult:
    return simulate(_sim_config(req, c.config, c.extra_decode))


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
                f"(cheapest tried, {closest.label() if closest else '-'}: {why})")

    def per_usd(c: PlanCandidate) -> str:
        return f"{c.goodput_per_usd_hour:.3f} req/s per $/h"

    if dis is not None and (agg is None or dis.goodput_per_usd_hour > agg.goodput_per_usd_hour):
        if agg is None:
            return (f"disaggregate: {dis.label()} meets the SLOs ({per_usd(dis)}); no "
                    "aggregated configuration within the bounds does")
        gain = dis.goodput_per_usd_hour / agg.goodput_per_usd_hour - 1
        return (f"disaggregate: {dis.label()} gives {per_usd(dis)} vs {per_usd(agg)} "
                f"for {agg.label()} (+{gain:.0%} goodput per dollar)")
    assert agg is not None
    if dis is None:
        tried = [c for c in everything if c.config.mode is ServingMode.DISAGGREGATED]
        sim_fail = [c for c in tried if c.sim is not None]
        example = min(sim_fail or tried, key=lambda c: c.cost_per_hour_usd, default=None)
        why = "; ".join(example.reasons()) if example else "no disaggregated configuration fits"
        return (f"do not disaggregate: {agg.label()} meets the SLOs ({per_usd(agg)}) "
                f"and no disaggregated configuration within the bounds does (cheapest, "
                f"{example.label() if example else '-'}: {why})")
    loss = 1 - dis.goodput_per_usd_hour / agg.goodput_per_usd_hour
    return (f"do not disaggregate: {agg.label()} gives {per_usd(agg)} vs {per_usd(dis)} "
            f"for the best disaggregated {dis.label()} ({loss:.0%} less goodput per "
            f"dollar: ${dis.cost_per_hour_usd:.2f}/h vs ${agg.cost_per_hour_usd:.2f}/h for "
            "the same load)")


def _candidates(req: PlanRequest) -> list[PlanCandidate]:
    """Every point of the space with its analytical operating point and screen (a chat
    workload's: at the tokens its prefills compute, see module doc), then the mixed decode
    pools of its bounded GPU types (:mod:`pdtrt.planner.mixed`)."""
    shape = req.shape
    isl = (max(1, round(shape.mean_computed_tokens(block=Instance.tokens_per_block)))
           if shape.reuses else req.isl)  # what a prefill computes, on average
    configs = list(candidate_configs(
        req.model, req.gpus, req.factors, isl=shape.longest_prompt, osl=req.osl,
        rate_per_s=req.rate_per_s, weights=req.weights, kv_dtype=req.kv_dtype,
        bounds=req.bounds, same_node=req.same_node,
        itl_target_s=req.slo.itl_ms / 1e3 if req.slo.itl_ms else None,
        prefill_isl=isl, context=shape.mean_prompt + req.osl / 2))

    def candidate(config: ServingConfig, p: OperatingPoint,
                  extra: ExtraDecode = ()) -> PlanCandidate:
        return PlanCandidate(config=config, point=p, screen_ok=screen(p, req.slo),
                             rate_per_s=req.rate_per_s, osl=req.osl, slo=req.slo,
                             fleet_use=req.fleet.use(config, extra) if req.fleet else None,
                             extra_decode=extra)

    out = [candidate(c, operating_point(c, req.factors, req.factors, isl=isl, osl=req.osl,
                                        rate_per_s=req.rate_per_s)) for c in configs]
    if shape.reuses:  # kv_aware routing and a mixed pool's kv_capacity: one spec setting
        return out
    for config, extra in mixed_configs(configs, req.bounded_gpus, req.bounds,
                                       same_node=req.same_node):
        out.append(candidate(config, mixed_point(
            config, extra, req.factors, isl=isl, osl=req.osl, rate_per_s=req.rate_per_s,
            same_node=req.same_node), extra))
    return out


def _verify(req: PlanRequest, everything: list[PlanCandidate]) -> list[PlanCandidate]:
    """``everything`` with the screened points simulated, per mode cheapest first, until
    ``verify_per_mode`` meet the SLO or ``max_sims_per_mode`` were tried."""
    out = list(everything)
    for mode in ServingMode:
        mine = sorted((i for i, c in enumerate(everything)
                       if c.screen_ok and c.config.mode is mode),
                      key=lambda i: (everything[i].cost_per_hour_usd,
                                     everything[i].point.ttft_p90_s))
        met = 0
        for i in mine[: req.max_sims_per_mode]:
            out[i] = replace(everything[i], sim=_sim(req, everything[i]))
            met += out[i].meets_slo
            if met >= req.verify_per_mode:
                break
    return out


def plan(req: PlanRequest) -> Plan:
    """Search, screen, verify and rank (see module doc)."""
    everything = _candidates(req)
    screened = [c for c in everything if c.screen_ok]
    everything = _verify(req, everything)
    ranked = sorted((c for c in everything if c.meets_slo),
                    key=lambda c: (-c.goodput_per_usd_hour, c.cost_per_hour_usd,
                                   c.label()))
    routing = local = None
    if ranked and req.shape.reuses:
        chosen = ranked[0]
        assert chosen.sim is not None
        routing = compare_routing(_sim_config(req, chosen.config, chosen.extra_decode),
                                  chosen.sim, simulate)
    disagg = next((c for c in ranked if c.config.mode is ServingMode.DISAGGREGATED), None)
    if disagg is not None:
        assert disagg.sim is not None
        local = sweep_local_prefill(_sim_config(req, disagg.config, disagg.extra_decode),
                                    disagg.sim, req.shape, simulate)
    without = plan(replace(req, fleet=None)) if req.fleet is not None else None
    return Plan(request=req, candidates=tuple(everything), ranked=tuple(ranked),
                verdict=_verdict(ranked, screened, everything, req), routing=routing,
                local_prefill=local, without_owned=without)
