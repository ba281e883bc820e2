"""Summary statistics of a benchmark run (definitions in docs/bench.md).

- **TTFT**: first streamed response minus send time, per request.
- **ITL** (inter-token latency): every gap between two consecutive streamed responses of a
  request; the ITL distribution pools the gaps of all requests (a request with n tokens gives
  n - 1 samples), so it shows stalls between tokens.
- **TPOT** (time per output token): per request, (last token - first token) / (n - 1), for
  requests with n >= 2 tokens -- the mean ITL of one request, one sample per request.
  (genai-perf calls this per-request value "inter token latency".)
- **E2E**: end of the request (its final response) minus send time.
- Percentiles interpolate linearly between samples (numpy's default, as genai-perf does).
- The **window** runs from the first measured send to the last measured end; throughputs are
  counts over it. Warm-up requests are excluded from everything.
- **Goodput**: requests per second that completed without error and met every SLO given:
  TTFT <= ``ttft_ms`` and TPOT <= ``itl_ms`` (per request, as in DistServe). A run *meets the
  SLOs* when the good fraction is at least the SLO percentile (90 % for p90).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pdtrt.bench.records import RequestRecord

__all__ = ["SLOTargets", "Dist", "Summary", "summarize"]

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True, kw_only=True)
class SLOTargets:
    percentile: int = 90
    ttft_ms: float | None = None
    itl_ms: float | None = None

    @property
    def any(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None


@dataclass(frozen=True, kw_only=True)
class Dist:
    """A latency distribution in milliseconds (all None when there are no samples)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    min: float | None = None
    max: float | None = None

    @classmethod
    def of_seconds(cls, samples_s: Sequence[float]) -> Dist:
        if not samples_s:
            return cls(count=0)
        ms = np.asarray(samples_s, dtype=float) * 1e3
        p = np.percentile(ms, PERCENTILES)
        return cls(count=len(ms), mean=float(ms.mean()), p50=float(p[0]), p90=float(p[1]),
                   p95=float(p[2]), p99=float(p[3]), min=float(ms.min()), max=float(ms.max()))

    def at(self, percentile: int) -> float | None:
        return getattr(self, f"p{percentile}")


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
    slo: SLOTargets
    num_good: int | None
    goodput_req_per_s: float | None
    slo_attainment: float | None
    meets_slo: bool | None
    cost_per_hour_usd: float | None
    cost_per_mtok_usd: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def is_good(record: RequestRecord, slo: SLOTargets) -> bool:
    if not record.ok:
        return False
    if slo.ttft_ms is not None and (record.ttft_s is None or record.ttft_s * 1e3 > slo.ttft_ms):
        return False
    tpot = record.tpot_s
    return slo.itl_ms is None or tpot is None or tpot * 1e3 <= slo.itl_ms


def summarize(records: Sequence[RequestRecord], *, slo: SLOTargets | None = None,
              cost_per_hour_usd: float | None = None) -> Summary:
    """The summary of the measured (non-warm-up) ``records``."""
    slo = slo or SLOTargets()
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    window_s = (max(r.end_s for r in measured) - min(r.send_s for r in measured)) \
        if measured else 0.0
    out_tokens = sum(r.output_tokens for r in ok)
    per_s = (lambda n: n / window_s) if window_s > 0 else (lambda n: 0.0)
    tok_per_s = per_s(out_tokens)
    good = sum(is_good(r, slo) for r in measured) if slo.any else None
    attainment = None if good is None or not measured else good / len(measured)
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
        slo=slo, num_good=good, goodput_req_per_s=None if good is None else per_s(good),
        slo_attainment=attainment,
        meets_slo=None if attainment is None else attainment >= slo.percentile / 100,
        cost_per_hour_usd=cost_per_hour_usd, cost_per_mtok_usd=cost_per_mtok)
