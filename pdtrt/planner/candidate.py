"""One configuration the planner considered: its analytical operating point, its simulation
(when verified), whether it meets the SLO, and why -- in words and as JSON.

A candidate meets the SLO only by simulation, judged by :func:`pdtrt.workload.evaluate_slo`
(the definition ``pdtrt bench`` and ``pdtrt simulate`` use). The screen before it is looser
(:data:`SCREEN_SLACK`). This module describes candidates; it does not search
(:mod:`pdtrt.planner.search`). With owned cards (``--have``) a candidate's cost is its
:class:`~pdtrt.planner.fleet.FleetUse`'s (owned cards at their power, the rest rented);
``rent_per_hour_usd`` is what it would cost all rented. A mixed decode pool
(:mod:`pdtrt.planner.mixed`) is the config plus ``extra_decode``: its label, GPUs and cost
count them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.enums import ServingMode
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.point import OperatingPoint
from pdtrt.planner.fleet import FleetUse
from pdtrt.planner.mixed import ExtraDecode, extra_label
from pdtrt.sim.metrics import SimResult
from pdtrt.workload.latency import Dist
from pdtrt.workload.slo import SLO

__all__ = ["SCREEN_SLACK", "PlanCandidate", "screen"]

SCREEN_SLACK = 1.15


def screen(p: OperatingPoint, slo: SLO) -> bool:
    """The analytical point is stable and its p90 TTFT and TPOT are within ``SCREEN_SLACK``
    of the targets (deliberately loose: the simulation decides)."""
    if not p.stable:
        return False
    if slo.ttft_ms is not None and p.ttft_p90_s * 1e3 > slo.ttft_ms * SCREEN_SLACK:
        return False
    if slo.itl_ms is not None and p.tpot_p90_s * 1e3 > slo.itl_ms * SCREEN_SLACK:
        return False
    return True


@dataclass(frozen=True, kw_only=True)
class PlanCandidate:
    config: ServingConfig
    point: OperatingPoint
    screen_ok: bool
    sim: SimResult | None = None
    rate_per_s: float
    osl: int
    slo: SLO
    fleet_use: FleetUse | None = None  # with owned cards: which ones, and the cost
    # a mixed decode pool: replicas of other GPU types beside the config's decode pool,
    # routed by KV capacity (pdtrt.planner.mixed)
    extra_decode: ExtraDecode = ()

    def label(self) -> str:
        """The configuration's label, a mixed pool's other decode replicas included."""
        return self.config.label() + extra_label(self.extra_decode)

    @property
    def num_gpus(self) -> int:
        return self.config.num_gpus + sum(i.num_gpus * n for i, n in self.extra_decode)

    @property
    def meets_slo(self) -> bool:
        return self.sim is not None and self.sim.slo_met

    @property
    def cost_per_hour_usd(self) -> float:
        """What the configuration costs per hour: owned cards at their power, when given."""
        if self.fleet_use is not None:
            return self.fleet_use.cost_per_hour_usd
        return self.rent_per_hour_usd

    @property
    def rent_per_hour_usd(self) -> float:
        """What it would cost with every card rented."""
        return self.config.cost_per_hour_usd() + sum(
            inst.price_per_hour_usd() * n for inst, n in self.extra_decode)

    def usd_per_mtok(self, cost_per_hour_usd: float | None = None) -> float | None:
        """USD per million output tokens at the target rate (of ``cost_per_hour_usd``,
        default this candidate's cost); None when unstable or free."""
        cost = self.cost_per_hour_usd if cost_per_hour_usd is None else cost_per_hour_usd
        if not self.point.stable or not cost:
            return None
        return cost / 3600 / (self.rate_per_s * self.osl) * 1e6

    @property
    def goodput_req_per_s(self) -> float:
        return self.sim.goodput_req_per_s if self.sim is not None else 0.0

    @property
    def goodput_per_usd_hour(self) -> float:
        cost = self.cost_per_hour_usd
        return self.goodput_req_per_s / cost if cost else 0.0

    @property
    def user_tok_per_s(self) -> float:
        tpot_s = self.point.tpot_s
        if self.sim is not None:
            mean_ms = self.sim.tpot_ms.mean
            tpot_s = mean_ms / 1e3 if mean_ms is not None else math.nan
        return 1.0 / tpot_s if tpot_s and math.isfinite(tpot_s) else 0.0

    @property
    def tok_per_s_per_usd_hour(self) -> float:
        if not self.point.stable or not self.cost_per_hour_usd:
            return 0.0
        return self.rate_per_s * self.osl / self.cost_per_hour_usd

    def _at_slo_ms(self, simulated: Dist | None, analytical_p90_s: float) -> float:
        if simulated is None:
            return analytical_p90_s * 1e3
        value = simulated.at(self.slo.percentile)
        return math.inf if value is None else value

    @property
    def ttft_ms_at_slo(self) -> float:
        """TTFT at the SLO percentile: simulated, else the analytical p90 (ms; inf: none)."""
        return self._at_slo_ms(self.sim.ttft_ms if self.sim else None, self.point.ttft_p90_s)

    @property
    def tpot_ms_at_slo(self) -> float:
        """Per-request TPOT at the SLO percentile, likewise (what ``itl_ms`` is held to)."""
        return self._at_slo_ms(self.sim.tpot_ms if self.sim else None, self.point.tpot_p90_s)

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
        if self.extra_decode:
            out.append("mixed decode pool, kv_capacity routing: each replica takes the share "
                       "its KV blocks hold (the analytical figures: its slower type)")
        pct = self.slo.percentile.label
        for name, value, target in (("TTFT", self.ttft_ms_at_slo, self.slo.ttft_ms),
                                    ("TPOT", self.tpot_ms_at_slo, self.slo.itl_ms)):
            if target is None:
                continue
            verb = "headroom" if value <= target else "MISSES"
            out.append(f"{name} {pct} {value:.0f}/{target:g} ms "
                       f"({verb} {abs(1 - value / target):.0%})")
        if self.sim is not None:
            report = self.sim.slo_report
            out.append(f"SLO attainment {report.attainment:.0%} (need "
                       f"{int(self.slo.percentile)}%)"
                       + ("; backlog growing: overloaded" if report.backlog_growing else ""))
        return out

    def to_dict(self) -> dict[str, object]:
        stable = self.point.stable
        return {
            "config": self.label(), "mode": str(self.config.mode),
            "num_gpus": self.num_gpus,
            "cost_per_hour_usd": round(self.cost_per_hour_usd, 4),
            "screen_ok": self.screen_ok, "simulated": self.sim is not None,
            "meets_slo": self.meets_slo,
            "slo_attainment": round(self.sim.attainment, 4) if self.sim is not None else None,
            "goodput_req_per_s": round(self.goodput_req_per_s, 4),
            "goodput_per_usd_hour": round(self.goodput_per_usd_hour, 5),
            "ttft_ms_at_slo": round(self.ttft_ms_at_slo, 2) if stable else None,
            "tpot_ms_at_slo": round(self.tpot_ms_at_slo, 2) if stable else None,
            "user_tok_per_s": round(self.user_tok_per_s, 2),
            "reasons": self.reasons(),
            "simulation": self.sim.to_dict() if self.sim is not None else None,
            **({"fleet": self.fleet_use.to_dict()} if self.fleet_use is not None else {}),
            **({"mixed_decode": [{"gpu": inst.gpu.key, "tp": inst.tp, "instances": n}
                                 for inst, n in self.extra_decode],
                "decode_routing": "kv_capacity"} if self.extra_decode else {}),
        }
