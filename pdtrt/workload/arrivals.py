"""When requests arrive: open or closed loop, and the one seeded open-loop arrival generator.

*Open loop* sends requests at planned times whatever is in flight; *closed loop* keeps a fixed
number of users, each sending its next request when its last one ends (all start at t = 0).
Open-loop times come from :func:`arrival_times_s` for ``pdtrt bench``, ``pdtrt simulate`` and
``pdtrt plan`` alike, with one convention: **the first request arrives at t = 0** (a run starts
with its first send), and the gaps after it are independent exponentials of mean
``1 / rate_per_s`` (*Poisson*; never clipped, long gaps are part of the process) or exactly
``1 / rate_per_s`` (*constant*). So n arrivals span n - 1 gaps.

The generator is the caller's ``numpy`` ``Generator``; :func:`arrival_rng` gives the one every
pdtrt command seeds from ``--seed``, so bench, its ``--compare`` runs and the simulator draw the
same schedule for a seed. This module does not decide what each request is
(:mod:`pdtrt.workload.request_mix`) nor replay a trace's own times (:mod:`pdtrt.workload.trace`).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from pdtrt.errors import WorkloadError

__all__ = ["ARRIVAL_STREAM", "ArrivalProcess", "LoopKind", "arrival_rng", "arrival_times_s"]

ARRIVAL_STREAM = 1  # second seed word of the arrival generator (requests: 0, then the index)


class LoopKind(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class ArrivalProcess(StrEnum):
    POISSON = "poisson"
    CONSTANT = "constant"


def arrival_rng(seed: int) -> np.random.Generator:
    """The arrival generator of a run seeded with ``seed``."""
    return np.random.default_rng([seed, ARRIVAL_STREAM])


def arrival_times_s(process: ArrivalProcess, rate_per_s: float, rng: np.random.Generator, *,
                    num_requests: int | None = None,
                    duration_s: float | None = None) -> tuple[float, ...]:
    """Arrival times (s from the start, the first at 0) of ``num_requests`` requests, or of
    those arriving before ``duration_s``, whichever bound comes first. Raises WorkloadError for
    a rate <= 0, no bound, or a negative count."""
    if not rate_per_s > 0:
        raise WorkloadError(f"the request rate must be > 0 per second, got {rate_per_s}")
    if num_requests is None and duration_s is None:
        raise WorkloadError("an open-loop run needs a bound: a request count or a duration")
    if num_requests is not None and num_requests < 0:
        raise WorkloadError(f"the request count must be >= 0, got {num_requests}")
    times: list[float] = []
    t_s = 0.0
    while (num_requests is None or len(times) < num_requests) and \
            (duration_s is None or t_s < duration_s):
        times.append(t_s)
        gap_s = rng.exponential(1.0 / rate_per_s) if process is ArrivalProcess.POISSON \
            else 1.0 / rate_per_s
        t_s += float(gap_s)
    return tuple(times)
