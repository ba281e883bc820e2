"""The cheapest deployment meeting an SLO, found by simulation: shared by the benchmark scripts.

Meeting the SLO is taken as monotone in instance count (more instances never hurt at a fixed
rate), so the fewest instances are found by doubling then bisection, after one look at the
most allowed (an infeasible pool costs one simulation, not a doubling through overloaded
ones); a disaggregated pool pair is searched over prompt instances upward, each with its
fewest decode instances, until the prompt instances with a single decode instance cost more
than the best pair found.
"""

from __future__ import annotations

from collections.abc import Callable


def fewest(meets: Callable[[int], bool], low: int = 1, high: int = 64) -> int | None:
    """The smallest n in [low, high] with ``meets(n)``; None if even ``high`` does not."""
    low = max(1, low)
    if not meets(high):
        return None  # one simulation instead of a doubling through overloaded ones
    if meets(low):
        return low
    lo, hi = low, low
    while not meets(hi):
        if hi >= high:
            return None
        lo, hi = hi, min(2 * hi, high)
    while hi - lo > 1:  # meets(hi), not meets(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


def cheapest_pair(meets: Callable[[int, int], bool], cost: Callable[[int, int], float], *,
                  low: int = 1, high: int = 64) -> tuple[int, int] | None:
    """(prompt, decode) instances meeting the SLO at the least ``cost``; None if none within
    ``high`` of each."""
    best: tuple[int, int] | None = None
    for a in range(max(1, low), high + 1):
        if best is not None and cost(a, 1) >= cost(*best):
            break  # a prompt instances cost this much at least: more can only cost more
        b = fewest(lambda b, a=a: meets(a, b), 1, high)
        if b is not None and (best is None or cost(a, b) < cost(*best)):
            best = (a, b)
    return best
