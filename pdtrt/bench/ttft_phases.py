"""The server's TTFT by phase over a run's requests: the distribution of each column, and the
requests at the TTFT percentiles that the stacked-bar plot shows.

Each measured request the server timed (:attr:`~pdtrt.bench.records.RequestRecord.server_timing`)
has its server-side TTFT and the five phases that partition it (queue, prefill, decode queue,
KV transfer, first decode; :mod:`pdtrt.client.timing`). Percentiles of the phases do not add up
to the percentile of the TTFT, so the plot stacks, for p50/p90/p99, the phases of *the request
at that percentile* of the server's TTFT (nearest rank): each bar is one real request and sums
to its TTFT. The report's per-column percentiles are the distributions of each column alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pdtrt.bench.records import SERVER_TIMING_FIELDS, RequestRecord
from pdtrt.client.timing import ServerTiming
from pdtrt.enums import Percentile
from pdtrt.workload.latency import Dist

__all__ = ["BAR_PERCENTILES", "phase_dists", "request_at", "timed"]

BAR_PERCENTILES = (Percentile.P50, Percentile.P90, Percentile.P99)


def timed(records: Sequence[RequestRecord]) -> list[ServerTiming]:
    """The server timings of the measured, successful ``records`` that have one."""
    return [r.server_timing for r in records
            if not r.warmup and r.ok and r.server_timing is not None]


def phase_dists(records: Sequence[RequestRecord]) -> dict[str, Dist] | None:
    """Per column of :data:`~pdtrt.bench.records.SERVER_TIMING_FIELDS`, its distribution (ms)
    over the timed requests; None when no request was timed (a model without the timing)."""
    timings = timed(records)
    if not timings:
        return None
    columns = [(t.ttft_ms, *t.phases_ms.values()) for t in timings]
    return {name: Dist.of_seconds([row[i] / 1e3 for row in columns])
            for i, name in enumerate(SERVER_TIMING_FIELDS)}


def request_at(timings: Sequence[ServerTiming], percentile: Percentile) -> ServerTiming:
    """The timing at ``percentile`` of the server's TTFT, by nearest rank (a real request).
    Raises ValueError for no timings."""
    if not timings:
        raise ValueError("no timed request")
    ranked = sorted(timings, key=lambda t: t.ttft_ms)
    rank = max(1, math.ceil(int(percentile) / 100 * len(ranked)))
    return ranked[rank - 1]
