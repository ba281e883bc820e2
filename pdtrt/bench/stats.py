"""Summary statistics of a benchmark run (definitions in docs/bench.md).

- **TTFT**: first streamed response minus send time, per request.
- **ITL** (inter-token latency): every gap between two consecutive tokens of a request -- a
  response holding k tokens (TensorRT-LLM's ``stream_interval``) gives k gaps of its gap / k
  (:func:`pdtrt.client.types.token_gaps_s`); the ITL distribution pools the gaps of all
  requests (a request with n tokens gives n - 1 samples), so it shows stalls between tokens.
- **TPOT** (time per output token): per request, (last token - first token) / (n - 1), for
  requests with n >= 2 tokens -- the mean ITL of one request, one sample per request.
  (genai-perf calls this per-request value "inter token latency".)
- **E2E**: end of the request (its final response) minus send time.
- The **window** runs from the first measured send to the last measured end; throughputs are
  counts over it. Warm-up requests are excluded from everything.
- **Attainment, goodput, "meets the SLOs"**: :func:`pdtrt.workload.slo.evaluate_slo` on the
  measured requests -- the one definition the simulator and the planner use too (per request,
  as in DistServe; see that module).
- **Server TTFT by phase** (``ttft_phases_ms``; only for a model that answers the timing):
  the distribution of the server's TTFT and of each of the five phases that sum to it
  (:mod:`pdtrt.bench.ttft_phases`).

This module summarises records; it neither sends requests nor draws plots.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pdtrt.bench.records import RequestRecord
from pdtrt.bench.ttft_phases import phase_dists
from pdtrt.workload.latency import Dist
from pdtrt.workload.slo import SLO, RequestOutcome, evaluate_slo, measurement_window_s

__all__ = ["Summary", "outcome", "summarize"]


@dataclass(frozen=True, kw_only=True)
class Summary:
    num_requests: int
    num_ok: int
    num_errors: int
    errors_by_kind: dict[str, int]
    input_tokens: int
    output_tokens: int
    requested_tokens: int
    window_s: float
    request_per_s: float
    output_tok_per_s: float
    ttft_ms: Dist
    itl_ms: Dist
    tpot_ms: Dist
    e2e_ms: Dist
    lag_ms: Dist
    slo: SLO
    num_good: int | None  # the SLO fields are None when no SLO target is given
    goodput_req_per_s: float | None
    slo_attainment: float | None
    meets_slo: bool | None
    backlog_growing: bool
    cost_per_hour_usd: float | None
    cost_per_mtok_usd: float | None
    # multi-turn traces only (else None, and left out of to_dict): TTFT of conversations'
    # first turns and of their later turns, which carry the conversation so far
    ttft_first_turn_ms: Dist | None = None
    ttft_later_turns_ms: Dist | None = None
    # requests the server timed only (else None, left out of to_dict): column of
    # SERVER_TIMING_FIELDS -> its distribution
    ttft_phases_ms: dict[str, Dist] | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_FIELDS:
                continue
            if name == "ttft_phases_ms" and value is not None:
                value = {column: dist.to_dict() for column, dist in value.items()}
            out[name] = value.to_dict() if isinstance(value, Dist | SLO) else value
        return out


_OPTIONAL_FIELDS = ("ttft_first_turn_ms", "ttft_later_turns_ms", "ttft_phases_ms")


def outcome(record: RequestRecord) -> RequestOutcome:
    """What the SLO judges of one record (its times are seconds of the run's clock)."""
    return RequestOutcome(sent_s=record.send_s, done_s=record.end_s, ttft_s=record.ttft_s,
                          tpot_s=record.tpot_s, ok=record.ok)


def summarize(records: Sequence[RequestRecord], *, slo: SLO | None = None,
              cost_per_hour_usd: float | None = None) -> Summary:
    """The summary of the measured (non-warm-up) ``records``."""
    slo = slo or SLO()
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    outcomes = [outcome(r) for r in measured]
    window_s = measurement_window_s(outcomes)
    out_tokens = sum(r.output_tokens for r in ok)
    per_s = (lambda n: n / window_s) if window_s > 0 else (lambda n: 0.0)
    tok_per_s = per_s(out_tokens)
    report = evaluate_slo(outcomes, slo)
    judged = slo.any and bool(measured)  # attainment needs a target and a request
    cost_per_mtok = None
    if cost_per_hour_usd is not None and tok_per_s > 0:
        cost_per_mtok = cost_per_hour_usd / 3600.0 / tok_per_s * 1e6
    return Summary(
        num_requests=len(measured), num_ok=len(ok), num_errors=len(measured) - len(ok),
        errors_by_kind=dict(Counter(r.error_kind or "unknown" for r in measured if not r.ok)),
        input_tokens=sum(r.input_tokens for r in measured), output_tokens=out_tokens,
        requested_tokens=sum(r.max_tokens for r in measured), window_s=window_s,
        request_per_s=per_s(len(ok)), output_tok_per_s=tok_per_s,
        ttft_ms=Dist.of_seconds([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_ms=Dist.of_seconds([g for r in ok for g in r.itls_s]),
        tpot_ms=Dist.of_seconds([r.tpot_s for r in ok if r.tpot_s is not None]),
        e2e_ms=Dist.of_seconds([r.e2e_s for r in ok]),
        lag_ms=Dist.of_seconds([r.lag_s for r in measured if r.lag_s is not None]),
        slo=slo, num_good=report.num_good if slo.any else None,
        goodput_req_per_s=report.goodput_req_per_s if slo.any else None,
        slo_attainment=report.attainment if judged else None,
        meets_slo=report.meets_slo if judged else None,
        backlog_growing=report.backlog_growing,
        cost_per_hour_usd=cost_per_hour_usd, cost_per_mtok_usd=cost_per_mtok,
        ttft_phases_ms=phase_dists(measured), **_by_turn(ok))


def _by_turn(ok: Sequence[RequestRecord]) -> dict[str, Dist]:
    """TTFT of first and of later turns, for a run of conversations."""
    turns = [r for r in ok if r.turn is not None and r.ttft_s is not None]
    if not turns:
        return {}
    return {"ttft_first_turn_ms": Dist.of_seconds([r.ttft_s for r in turns if r.turn == 0]),
            "ttft_later_turns_ms": Dist.of_seconds([r.ttft_s for r in turns if r.turn])}
