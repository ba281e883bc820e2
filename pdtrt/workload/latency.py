"""A latency distribution as pdtrt reports it: count, mean, p50/p90/p95/p99, min, max in ms.

The same summary for measured runs (``pdtrt bench``) and simulated ones (``pdtrt simulate``,
``pdtrt plan``). Percentiles interpolate linearly between samples (numpy's default, as
genai-perf does). With no samples every value is None -- never NaN or 0, so "no data" cannot
pass for a latency. What the samples are (TTFT, ITL, TPOT, E2E) is the caller's business.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from pdtrt.enums import Percentile

__all__ = ["Dist"]


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
    def of_seconds(cls, samples_s: Sequence[float] | np.ndarray) -> Dist:
        ms = np.asarray(samples_s, dtype=float) * 1e3
        if ms.size == 0:
            return cls(count=0)
        p = np.percentile(ms, [int(q) for q in Percentile])
        by = dict(zip(Percentile, (float(v) for v in p), strict=True))
        return cls(count=int(ms.size), mean=float(ms.mean()), p50=by[Percentile.P50],
                   p90=by[Percentile.P90], p95=by[Percentile.P95], p99=by[Percentile.P99],
                   min=float(ms.min()), max=float(ms.max()))

    def at(self, percentile: Percentile) -> float | None:
        """The value at ``percentile``, ms (None without samples)."""
        return {Percentile.P50: self.p50, Percentile.P90: self.p90, Percentile.P95: self.p95,
                Percentile.P99: self.p99}[percentile]

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)
