"""Arrival processes of an open-loop benchmark: when each request is sent.

Times are seconds from the start of the measured run; the first request arrives at 0.
*Poisson* arrivals have independent exponential gaps of mean ``1 / rate_per_s`` (never
clipped: long gaps are part of the process); *constant* arrivals are exactly ``1 / rate_per_s``
apart. The generator is the caller's seeded ``numpy`` ``Generator``, so a schedule is
reproducible and two runs (e.g. ``--compare``) can share it.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from pdtrt.errors import BenchError

__all__ = ["ArrivalProcess", "arrival_times_s"]


class ArrivalProcess(StrEnum):
    POISSON = "poisson"
    CONSTANT = "constant"


def arrival_times_s(process: ArrivalProcess, rate_per_s: float, rng: np.random.Generator, *,
                    num_requests: int | None = None,
                    duration_s: float | None = None) -> tuple[float, ...]:
    """Arrival times (s) of ``num_requests`` requests, or of those arriving before
    ``duration_s``, whichever bound comes first. Raises BenchError for a bad rate or bound."""
    if not rate_per_s > 0:
        raise BenchError(f"the request rate must be > 0 per second, got {rate_per_s}")
    if num_requests is None and duration_s is None:
        raise BenchError("an open-loop run needs a bound: a request count or a duration")
    if num_requests is not None and num_requests < 0:
        raise BenchError(f"the request count must be >= 0, got {num_requests}")
    times: list[float] = []
    t_s = 0.0
    while (num_requests is None or len(times) < num_requests) and \
            (duration_s is None or t_s < duration_s):
        times.append(t_s)
        gap_s = rng.exponential(1.0 / rate_per_s) if process is ArrivalProcess.POISSON \
            else 1.0 / rate_per_s
        t_s += float(gap_s)
    return tuple(times)
