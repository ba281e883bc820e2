"""Latency SLOs and the one definition of "meets the SLO", attainment and goodput.

pdtrt uses DistServe's per-request definition, for measured runs (``pdtrt bench``) and
simulated ones (``pdtrt simulate``, ``pdtrt plan``) alike -- both call :func:`evaluate_slo`:

- a request **meets the SLO** iff it completed without error, its TTFT <= ``ttft_ms`` and its
  TPOT -- (last token - first token) / (tokens - 1), the mean inter-token time of *that*
  request -- <= ``itl_ms`` (each target only if given; a one-token answer has no TPOT and
  cannot miss it);
- **attainment** = requests meeting it / measured requests. A request that failed or never
  finished counts as a miss, so a server cannot pass by dropping its slow requests;
- **goodput** = requests meeting it per second of the measurement window: the first measured
  send to the last measured completion (the drain after the last send included, as a real
  run experiences it);
- a run **meets the SLO** when attainment >= the SLO percentile as a share (0.90 for p90)
  *and* it is not overloaded: a run whose later half of requests (by send time) has a median
  TTFT above 1.5x the earlier half's + 50 ms has a growing backlog, and its attainment only
  looks good because the run was short.

Why per request rather than percentiles of pooled samples (such as p90 TTFT and p90 of every
inter-token gap): attainment and goodput count requests, so the verdict
has to count the same thing -- with pooled percentiles a run could "meet the SLO" while most
of its requests missed a target, or the reverse. Token-level jitter (one 100 ms gap in an
otherwise fast stream) therefore does not fail the SLO; it stays visible in the ITL
distribution's tail, which every report shows beside it.

``pdtrt plan --ttft-p90 MS --itl-p90 MS`` and the spec's ``slo`` section (``percentile``,
``ttft_ms``, ``itl_ms``) are this SLO: thresholds per request, met by a share of requests.
This module judges outcomes; it does not measure them (``pdtrt.bench.records``, the simulator).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pdtrt.enums import Percentile
from pdtrt.errors import WorkloadError

__all__ = ["SLO", "RequestOutcome", "SloReport", "backlog_growing", "evaluate_slo",
           "measurement_window_s"]

BACKLOG_MIN_REQUESTS = 20
BACKLOG_RATIO = 1.5
BACKLOG_MARGIN_S = 0.05


@dataclass(frozen=True, kw_only=True)
class SLO:
    """Per-request latency targets (None: no target) and the share of requests that must meet
    them, given as a percentile (``P90``: 90 %). ``itl_ms`` is compared with each request's
    TPOT (its mean inter-token latency)."""

    percentile: Percentile = Percentile.P90
    ttft_ms: float | None = None
    itl_ms: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.percentile, Percentile):
            try:
                object.__setattr__(self, "percentile", Percentile(self.percentile))
            except ValueError:
                raise WorkloadError(
                    f"SLO percentile {self.percentile} is not one of "
                    f"{', '.join(str(int(p)) for p in Percentile)}") from None
        for name, value in (("ttft_ms", self.ttft_ms), ("itl_ms", self.itl_ms)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise WorkloadError(f"SLO {name} must be > 0 ms, got {value}")

    @property
    def any(self) -> bool:
        """Whether any target is set."""
        return self.ttft_ms is not None or self.itl_ms is not None

    def to_dict(self) -> dict[str, object]:
        return {"percentile": int(self.percentile), "ttft_ms": self.ttft_ms,
                "itl_ms": self.itl_ms}


@dataclass(frozen=True, kw_only=True)
class RequestOutcome:
    """What one measured request experienced, in seconds (of the run's own clock)."""

    sent_s: float
    done_s: float | None  # None: never finished
    ttft_s: float | None  # None: no token
    tpot_s: float | None  # None: fewer than two tokens
    ok: bool = True  # False: it ended with an error

    @property
    def e2e_s(self) -> float | None:
        return None if self.done_s is None else self.done_s - self.sent_s

    def meets(self, slo: SLO) -> bool:
        """Completed without error and within every target of ``slo`` (see module doc)."""
        if not self.ok or self.done_s is None:
            return False
        if slo.ttft_ms is not None and (self.ttft_s is None or self.ttft_s * 1e3 > slo.ttft_ms):
            return False
        return slo.itl_ms is None or self.tpot_s is None or self.tpot_s * 1e3 <= slo.itl_ms


@dataclass(frozen=True, kw_only=True)
class SloReport:
    """The verdict on a run's outcomes under one SLO (definitions in the module doc)."""

    slo: SLO
    num_requests: int
    num_good: int
    window_s: float
    attainment: float
    goodput_req_per_s: float
    backlog_growing: bool
    meets_slo: bool

    def to_dict(self) -> dict[str, object]:
        return {**self.slo.to_dict(), "num_requests": self.num_requests,
                "num_good": self.num_good, "window_s": self.window_s,
                "attainment": self.attainment, "goodput_req_per_s": self.goodput_req_per_s,
                "backlog_growing": self.backlog_growing, "met": self.meets_slo}


def measurement_window_s(outcomes: Sequence[RequestOutcome]) -> float:
    """First send to last completion of ``outcomes`` (0 when none completed)."""
    done = [o.done_s for o in outcomes if o.done_s is not None]
    if not done:
        return 0.0
    return max(0.0, max(done) - min(o.sent_s for o in outcomes))


def backlog_growing(outcomes: Sequence[RequestOutcome]) -> bool:
    """Median TTFT of the later half (by send time) > 1.5x the earlier half's + 50 ms, with at
    least 20 requests that have a TTFT: arrivals outpace service."""
    ttft = [o.ttft_s for o in sorted(outcomes, key=lambda o: o.sent_s)
            if o.ok and o.ttft_s is not None]
    n = len(ttft)
    if n < BACKLOG_MIN_REQUESTS:
        return False
    first, second = np.median(ttft[: n // 2]), np.median(ttft[n // 2:])
    return bool(second > BACKLOG_RATIO * first + BACKLOG_MARGIN_S)


def evaluate_slo(outcomes: Sequence[RequestOutcome], slo: SLO) -> SloReport:
    """Attainment, goodput and the verdict of ``outcomes`` (the measured requests) under
    ``slo``. With no requests, attainment and goodput are 0 and the SLO is not met."""
    good = sum(o.meets(slo) for o in outcomes)
    window_s = measurement_window_s(outcomes)
    attainment = good / len(outcomes) if outcomes else 0.0
    growing = backlog_growing(outcomes)
    return SloReport(
        slo=slo, num_requests=len(outcomes), num_good=good, window_s=window_s,
        attainment=attainment, goodput_req_per_s=good / window_s if window_s > 0 else 0.0,
        backlog_growing=growing,
        # attainment >= percentile / 100, in integers so 27 of 30 meets p90 exactly
        meets_slo=bool(outcomes) and 100 * good >= int(slo.percentile) * len(outcomes)
        and not growing)
