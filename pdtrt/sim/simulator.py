"""The event loop: a heap of ``(time, event order, creation number, event)``, popped until empty.

The creation number is this run's own counter, so ties between events of the same type at the
same time resolve in creation order -- deterministic, and never by comparing events.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from pdtrt.sim.config import SimConfig
from pdtrt.sim.events import Event
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.state import SimState
from pdtrt.sim.workload import ArrivalKind, generate_requests

__all__ = ["run_events", "simulate"]


def run_events(state: SimState, initial: list[Event], *, max_events: int = 50_000_000) -> None:
    """Run events from ``initial`` until none is left (or ``max_events``, a runaway guard)."""
    heap: list[tuple[float, int, int, Event]] = []
    counter = itertools.count()
    for event in initial:
        heapq.heappush(heap, (event.time_s, int(event.order), next(counter), event))
    while heap and state.num_events < max_events:
        time_s, _, _, event = heapq.heappop(heap)
        state.now_s = time_s
        state.num_events += 1
        for new in event.handle(state):
            heapq.heappush(heap, (new.time_s, int(new.order), next(counter), new))


def simulate(config: SimConfig, rng: np.random.Generator | None = None) -> SimResult:
    """Simulate ``config``; the RNG defaults to one seeded with ``config.seed``."""
    rng = rng if rng is not None else np.random.default_rng(config.seed)
    state = SimState(config, rng)
    specs = generate_requests(config.workload, rng, config.num_requests)
    if config.workload.arrivals is ArrivalKind.CLOSED:
        assert config.workload.concurrency is not None
        first, rest = specs[: config.workload.concurrency], specs[config.workload.concurrency:]
        state.closed_loop_backlog.extend(rest)
        initial: list[Event] = [state.arrival(s, 0.0) for s in first]
    else:
        initial = [state.arrival(s, s.arrival_s) for s in specs]
    run_events(state, initial)
    return _result(config, state)


def _result(config: SimConfig, state: SimState) -> SimResult:
    reqs = sorted(state.requests, key=lambda r: (r.arrival_s, r.id))
    skip = int(len(reqs) * config.warmup_share)
    measured = [r for r in reqs[skip:] if r.done_s is not None]
    unfinished = sum(1 for r in reqs if r.done_s is None)
    start = reqs[skip].arrival_s if len(reqs) > skip else 0.0
    # The window is the time the measured arrivals take at the nominal rate (open loop), or
    # their observed span (closed loop, traces; n arrivals cover n - 1 gaps). So a stable
    # open-loop run reports its target rate, not its sample's, and the drain after the last
    # arrival is not counted as idle capacity. All arrivals at one instant: the completions'.
    arrivals = [r.arrival_s for r in reqs[skip:]]
    w = config.workload
    if w.arrivals in (ArrivalKind.POISSON, ArrivalKind.CONSTANT) and w.rate_per_s:
        span = len(arrivals) / w.rate_per_s
    else:
        span = (arrivals[-1] - arrivals[0]) * len(arrivals) / (len(arrivals) - 1) \
            if len(arrivals) > 1 else 0.0
    end = max((r.done_s for r in measured), default=start)
    window = span if span > 0 else max(end - start, 1e-9)
    ttft = np.array([r.first_token_s - r.arrival_s for r in measured])  # type: ignore[operator]
    # per request, aligned with ttft; a one-token answer has no TPOT (0: it cannot miss)
    request_tpot = np.array([(r.last_token_s - r.first_token_s) / (r.osl - 1)  # type: ignore
                             if r.osl > 1 else 0.0 for r in measured])
    tpot = request_tpot[np.array([r.osl > 1 for r in measured], dtype=bool)] \
        if measured else request_tpot
    e2e = np.array([r.done_s - r.arrival_s for r in measured])  # type: ignore[operator]
    itl_t, itl = np.array(state.itl_time_s), np.array(state.itl_s)
    keep = itl_t >= start
    total_end = max((r.done_s for r in reqs if r.done_s is not None), default=0.0)
    utilisation = {}
    for role, replicas in state.replicas.items():
        utilisation[str(role)] = (sum(r.busy_s for r in replicas) / (total_end * len(replicas))
                                  if total_end > 0 else 0.0)
    if state.links:
        utilisation["kv_link"] = (sum(link.busy_s for link in state.links)
                                  / (total_end * len(state.links)) if total_end > 0 else 0.0)
    s = config.serving
    return SimResult(
        label=s.label(), mode=str(s.mode), seed=config.seed, num_requests=len(reqs),
        num_measured=len(measured), num_unfinished=unfinished, window_s=window, ttft_s=ttft,
        tpot_s=tpot, request_tpot_s=request_tpot, itl_s=itl[keep], e2e_s=e2e,
        itl_time_s=itl_t[keep],
        output_tokens=sum(r.osl for r in measured), utilisation=utilisation,
        num_gpus=s.num_gpus, cost_per_hour_usd=s.cost_per_hour_usd(), slo=config.slo,
        num_events=state.num_events)
