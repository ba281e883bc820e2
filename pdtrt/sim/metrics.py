"""What a simulation run measured: latency percentiles, SLO attainment, goodput, utilisation, cost.

Definitions (the same as ``pdtrt bench`` reports for real runs):

- TTFT = first token time - arrival; TPOT of a request = (last - first token) / (osl - 1);
  ITL = the gap between consecutive tokens of a request (every gap is one sample); E2E = done -
  arrival. The first ``warmup_share`` of requests (by arrival) are left out.
- SLO *met* when the SLO percentile of TTFT and of ITL are within their targets, every
  request finished, and the backlog is not growing: a run whose later half of requests (by
  arrival) has a median TTFT above ``1.5 x`` the earlier half's ``+ 50 ms`` is overloaded --
  its percentiles only look good because the run was short.
- *attainment*: share of requests whose TTFT and TPOT are both within the targets (DistServe);
  *goodput*: those requests per second of the measured window.
- utilisation: busy time of a pool's replicas / (window x replicas); link likewise.
- cost per million output tokens: price of all GPUs for the window / output tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdtrt.sim.config import SloTarget

__all__ = ["Distribution", "SimResult"]


@dataclass(frozen=True, kw_only=True)
class Distribution:
    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values_s: np.ndarray) -> Distribution:
        if values_s.size == 0:
            return cls(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
        q = np.quantile(values_s, [0.5, 0.9, 0.99])
        return cls(mean=float(values_s.mean()), p50=float(q[0]), p90=float(q[1]),
                   p99=float(q[2]))

    def at(self, percentile: int, values_s: np.ndarray) -> float:
        return float(np.quantile(values_s, percentile / 100)) if values_s.size else math.nan

    def to_ms(self) -> dict[str, float | None]:
        return {k: (None if math.isnan(v) else round(v * 1e3, 3))
                for k, v in (("mean", self.mean), ("p50", self.p50), ("p90", self.p90),
                             ("p99", self.p99))}


@dataclass(frozen=True, kw_only=True)
class SimResult:
    label: str
    mode: str
    seed: int
    num_requests: int
    num_measured: int
    num_unfinished: int
    window_s: float
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    request_tpot_s: np.ndarray
    itl_s: np.ndarray
    e2e_s: np.ndarray
    itl_time_s: np.ndarray
    output_tokens: int
    utilisation: dict[str, float]
    num_gpus: int
    cost_per_hour_usd: float
    slo: SloTarget
    num_events: int

    @property
    def ttft(self) -> Distribution:
        return Distribution.of(self.ttft_s)

    @property
    def tpot(self) -> Distribution:
        return Distribution.of(self.tpot_s)

    @property
    def itl(self) -> Distribution:
        return Distribution.of(self.itl_s)

    @property
    def e2e(self) -> Distribution:
        return Distribution.of(self.e2e_s)

    @property
    def req_per_s(self) -> float:
        return self.num_measured / self.window_s if self.window_s > 0 else 0.0

    @property
    def output_tok_per_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

    def _ok(self) -> np.ndarray:
        ok = np.ones(self.ttft_s.size, dtype=bool)
        if self.slo.ttft_ms is not None:
            ok &= self.ttft_s * 1e3 <= self.slo.ttft_ms
        if self.slo.itl_ms is not None:
            ok &= self.request_tpot_s * 1e3 <= self.slo.itl_ms
        return ok

    @property
    def attainment(self) -> float:
        return float(self._ok().mean()) if self.ttft_s.size else 0.0

    @property
    def goodput_req_per_s(self) -> float:
        return float(self._ok().sum()) / self.window_s if self.window_s > 0 else 0.0

    def percentile_ms(self, which: str) -> float:
        values = {"ttft": self.ttft_s, "itl": self.itl_s, "tpot": self.tpot_s}[which]
        return float(np.quantile(values, self.slo.percentile / 100)) * 1e3 if values.size \
            else math.inf

    @property
    def backlog_growing(self) -> bool:
        """TTFT drifting upwards over the run: arrivals outpace service (see module doc)."""
        n = self.ttft_s.size
        if n < 20:
            return False
        first, second = np.median(self.ttft_s[: n // 2]), np.median(self.ttft_s[n // 2:])
        return bool(second > 1.5 * first + 0.05)

    @property
    def slo_met(self) -> bool:
        if self.num_unfinished or self.backlog_growing:
            return False
        ok = True
        if self.slo.ttft_ms is not None:
            ok &= self.percentile_ms("ttft") <= self.slo.ttft_ms
        if self.slo.itl_ms is not None:
            ok &= self.percentile_ms("itl") <= self.slo.itl_ms
        return bool(ok)

    @property
    def usd_per_mtok(self) -> float | None:
        if not self.output_tokens or not self.cost_per_hour_usd:
            return None
        return self.cost_per_hour_usd * self.window_s / 3600 / self.output_tokens * 1e6

    @property
    def goodput_per_usd_hour(self) -> float:
        """SLO-meeting requests per second per dollar-hour of GPUs."""
        return self.goodput_req_per_s / self.cost_per_hour_usd if self.cost_per_hour_usd \
            else 0.0

    def to_dict(self) -> dict[str, object]:
        usd = self.usd_per_mtok
        return {
            "label": self.label, "mode": self.mode, "seed": self.seed,
            "num_requests": self.num_requests, "num_measured": self.num_measured,
            "num_unfinished": self.num_unfinished, "window_s": round(self.window_s, 4),
            "backlog_growing": self.backlog_growing,
            "ttft_ms": self.ttft.to_ms(), "tpot_ms": self.tpot.to_ms(),
            "itl_ms": self.itl.to_ms(), "e2e_ms": self.e2e.to_ms(),
            "req_per_s": round(self.req_per_s, 4),
            "output_tok_per_s": round(self.output_tok_per_s, 2),
            "slo": {"percentile": self.slo.percentile, "ttft_ms": self.slo.ttft_ms,
                    "itl_ms": self.slo.itl_ms, "met": self.slo_met,
                    "attainment": round(self.attainment, 4)},
            "goodput_req_per_s": round(self.goodput_req_per_s, 4),
            "utilisation": {k: round(v, 4) for k, v in self.utilisation.items()},
            "num_gpus": self.num_gpus, "cost_per_hour_usd": round(self.cost_per_hour_usd, 4),
            "usd_per_mtok": None if usd is None else round(usd, 4),
            "num_events": self.num_events,
        }
