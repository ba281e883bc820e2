"""What a simulation run measured: latency distributions, SLO attainment, goodput, utilisation,
cost -- with the definitions ``pdtrt bench`` applies to real runs.

- TTFT = first token time - send time; TPOT of a request = (last - first token) / (osl - 1);
  ITL = the gap between consecutive tokens of a request (every gap is one sample); E2E = done
  - send. The first ``warmup_share`` of requests (by arrival) are left out.
- Attainment, goodput and "SLO met": :func:`pdtrt.workload.slo.evaluate_slo` on the measured
  requests' outcomes (:func:`outcome`) -- the function ``pdtrt bench`` calls, so one set of
  per-request outcomes gets one verdict whichever tool measured it. A request that never
  finished counts as a miss; an overloaded run (growing backlog) never meets the SLO.
- The window (for goodput, throughput and cost) is the one of that function: first measured
  send to last measured completion.
- utilisation: busy time of a pool's replicas / (last completion x replicas); link likewise.
- cost per million output tokens: price of all GPUs for the window / output tokens.
- reuse (with conversations, kv-aware routing or conditional disaggregation): prompt tokens
  computed (prompt - cached), KV bytes sent over links, local vs remote prefills, and TTFT of
  first turns vs later turns (the measured requests that finished).

This module summarises a finished run; it does not run one (:mod:`pdtrt.sim.simulator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pdtrt.enums import ServingMode
from pdtrt.sim.entities import Request
from pdtrt.workload.latency import Dist
from pdtrt.workload.slo import SLO, RequestOutcome, SloReport, evaluate_slo

__all__ = ["ReuseStats", "SimResult", "outcome"]


def outcome(req: Request) -> RequestOutcome:
    """What the SLO judges of one simulated request (unfinished: ``done_s`` None)."""
    ttft = None if req.first_token_s is None else req.first_token_s - req.arrival_s
    tpot = None
    if req.done_s is not None and req.osl > 1:
        assert req.first_token_s is not None and req.last_token_s is not None
        tpot = (req.last_token_s - req.first_token_s) / (req.osl - 1)
    return RequestOutcome(sent_s=req.arrival_s, done_s=req.done_s, ttft_s=ttft, tpot_s=tpot)


@dataclass(frozen=True, kw_only=True, eq=False)
class ReuseStats:
    """Of the measured requests: what prefix reuse and the prefill path saved."""

    computed_prompt_tokens: int
    kv_transfer_bytes: int
    num_local_prefills: int  # disaggregated, prefilled by the decode replica itself
    num_local_queued: int  # of those, because the prefill pool was queued (prefill_queued)
    num_remote_prefills: int  # disaggregated, prefilled by a prefill replica
    ttft_first_turn_s: np.ndarray
    ttft_later_turns_s: np.ndarray

    def to_dict(self) -> dict[str, object]:
        return {"computed_prompt_tokens": self.computed_prompt_tokens,
                "kv_transfer_bytes": self.kv_transfer_bytes,
                "num_local_prefills": self.num_local_prefills,
                "num_local_queued": self.num_local_queued,
                "num_remote_prefills": self.num_remote_prefills,
                "ttft_first_turn_ms": Dist.of_seconds(self.ttft_first_turn_s).to_dict(),
                "ttft_later_turns_ms": Dist.of_seconds(self.ttft_later_turns_s).to_dict()}


@dataclass(frozen=True, kw_only=True, eq=False)
class SimResult:
    label: str
    mode: ServingMode
    seed: int
    num_requests: int
    num_unfinished: int  # of all requests, warm-up included
    outcomes: tuple[RequestOutcome, ...]  # the measured requests, by arrival
    itl_s: np.ndarray  # every inter-token gap after the first measured arrival
    itl_time_s: np.ndarray  # when each gap ended
    output_tokens: int
    utilisation: dict[str, float]
    num_gpus: int
    cost_per_hour_usd: float
    slo: SLO
    num_events: int
    prompt_tokens: int = 0  # of the measured requests
    cached_prompt_tokens: int = 0  # of those, taken from a block cache (shared prefix)
    reuse: ReuseStats | None = None

    @cached_property
    def _done(self) -> list[RequestOutcome]:
        return [o for o in self.outcomes if o.done_s is not None]

    @property
    def num_measured(self) -> int:
        """Measured requests that finished."""
        return len(self._done)

    @cached_property
    def ttft_s(self) -> np.ndarray:
        return np.array([o.ttft_s for o in self._done], dtype=float)

    @cached_property
    def tpot_s(self) -> np.ndarray:
        """Per request with at least two tokens."""
        return np.array([o.tpot_s for o in self._done if o.tpot_s is not None], dtype=float)

    @cached_property
    def e2e_s(self) -> np.ndarray:
        return np.array([o.e2e_s for o in self._done], dtype=float)

    @property
    def ttft_ms(self) -> Dist:
        return Dist.of_seconds(self.ttft_s)

    @property
    def tpot_ms(self) -> Dist:
        return Dist.of_seconds(self.tpot_s)

    @property
    def itl_ms(self) -> Dist:
        return Dist.of_seconds(self.itl_s)

    @property
    def e2e_ms(self) -> Dist:
        return Dist.of_seconds(self.e2e_s)

    @cached_property
    def slo_report(self) -> SloReport:
        return evaluate_slo(self.outcomes, self.slo)

    @property
    def window_s(self) -> float:
        return self.slo_report.window_s

    @property
    def attainment(self) -> float:
        return self.slo_report.attainment

    @property
    def goodput_req_per_s(self) -> float:
        return self.slo_report.goodput_req_per_s

    @property
    def backlog_growing(self) -> bool:
        return self.slo_report.backlog_growing

    @property
    def slo_met(self) -> bool:
        return self.slo_report.meets_slo

    @property
    def req_per_s(self) -> float:
        return self.num_measured / self.window_s if self.window_s > 0 else 0.0

    @property
    def output_tok_per_s(self) -> float:
        return self.output_tokens / self.window_s if self.window_s > 0 else 0.0

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
            "label": self.label, "mode": str(self.mode), "seed": self.seed,
            "num_requests": self.num_requests, "num_measured": self.num_measured,
            "num_unfinished": self.num_unfinished, "window_s": round(self.window_s, 4),
            "ttft_ms": self.ttft_ms.to_dict(), "tpot_ms": self.tpot_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(), "e2e_ms": self.e2e_ms.to_dict(),
            "req_per_s": round(self.req_per_s, 4),
            "output_tok_per_s": round(self.output_tok_per_s, 2),
            "slo": self.slo_report.to_dict(),
            "goodput_req_per_s": round(self.goodput_req_per_s, 4),
            "utilisation": {k: round(v, 4) for k, v in self.utilisation.items()},
            "num_gpus": self.num_gpus, "cost_per_hour_usd": round(self.cost_per_hour_usd, 4),
            "usd_per_mtok": None if usd is None else round(usd, 4),
            "num_events": self.num_events,
            **({"prompt_tokens": self.prompt_tokens,
                "cached_prompt_tokens": self.cached_prompt_tokens}
               if self.cached_prompt_tokens or self.reuse else {}),
            **({"reuse": self.reuse.to_dict()} if self.reuse else {}),
        }
