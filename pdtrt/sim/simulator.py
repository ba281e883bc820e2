"""The event loop: a heap of ``(time, event order, creation number, event)``, popped until empty.

The creation number is this run's own counter, so ties between events of the same type at the
same time resolve in creation order -- deterministic, and never by comparing events. The loop
is the only place that creates :class:`ReplicaSchedule` events: after each handler it turns
the schedules the state recorded as wanted into events, in the order they were asked for.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

from pdtrt.enums import ServingMode
from pdtrt.sim.config import SimConfig
from pdtrt.sim.entities import Request
from pdtrt.sim.events import Event, ReplicaSchedule, RequestArrival
from pdtrt.sim.metrics import ReuseStats, SimResult, outcome
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.state import SimState
from pdtrt.sim.workload import generate_conversations
from pdtrt.workload.arrivals import LoopKind

__all__ = ["run_events", "run_to_end", "simulate"]


def run_events(state: SimState, initial: list[Event], *, max_events: int = 50_000_000) -> None:
    """Run events from ``initial`` until none is left (or ``max_events``, a runaway guard)."""
    heap: list[tuple[float, int, int, Event]] = []
    counter = itertools.count()

    def push(event: Event) -> None:
        heapq.heappush(heap, (event.time_s, int(event.order), next(counter), event))

    for event in initial:
        push(event)
    while heap and state.num_events < max_events:
        time_s, _, _, event = heapq.heappop(heap)
        state.now_s = time_s
        state.num_events += 1
        for new in event.handle(state):
            push(new)
        for role, index in state.take_wanted_schedules():
            push(ReplicaSchedule(time_s=state.now_s, role=role, index=index))


def simulate(config: SimConfig) -> SimResult:
    """Simulate ``config``. Randomness comes only from ``config.seed`` (request lengths and
    arrival times, as :mod:`pdtrt.workload` draws them), so a seed gives one result."""
    return _result(config, run_to_end(config))


def run_to_end(config: SimConfig) -> SimState:
    """Run ``config`` until no event is left; the final state (replicas, requests)."""
    state = SimState(config)
    convs = generate_conversations(config.workload, config.seed, config.num_requests)
    state.conversations = {conv[0].conversation: conv for conv in convs}
    if config.workload.loop is LoopKind.CLOSED:
        assert config.workload.concurrency is not None
        first, rest = convs[: config.workload.concurrency], convs[config.workload.concurrency:]
        state.closed_loop_backlog.extend(rest)
        initial: list[Event] = [RequestArrival.sent(c[0], 0.0, state) for c in first]
    else:
        initial = [RequestArrival.sent(c[0], c[0].arrival_s, state) for c in convs]
    run_events(state, initial)
    return state


def _utilisation(state: SimState) -> dict[str, float]:
    total_end = max((r.done_s for r in state.requests if r.done_s is not None), default=0.0)
    out = {}
    for role, replicas in state.replicas.items():
        out[str(role)] = (sum(r.busy_s for r in replicas) / (total_end * len(replicas))
                          if total_end > 0 else 0.0)
    if state.links:
        out["kv_link"] = (sum(link.busy_s for link in state.links)
                          / (total_end * len(state.links)) if total_end > 0 else 0.0)
    return out


def _result(config: SimConfig, state: SimState) -> SimResult:
    reqs = sorted(state.requests, key=lambda r: (r.arrival_s, r.id))
    measured = reqs[int(len(reqs) * config.warmup_share):]
    start = measured[0].arrival_s if measured else 0.0
    itl_t, itl = np.array(state.itl_time_s), np.array(state.itl_s)
    keep = itl_t >= start
    s = config.serving
    return SimResult(
        label=s.label(), mode=s.mode, seed=config.seed, num_requests=len(reqs),
        num_unfinished=sum(1 for r in reqs if r.done_s is None),
        outcomes=tuple(outcome(r) for r in measured), itl_s=itl[keep], itl_time_s=itl_t[keep],
        output_tokens=sum(r.osl for r in measured if r.done_s is not None),
        utilisation=_utilisation(state), num_gpus=s.num_gpus,
        cost_per_hour_usd=s.cost_per_hour_usd(), slo=config.slo, num_events=state.num_events,
        prompt_tokens=sum(r.isl for r in measured),
        cached_prompt_tokens=sum(r.cached for r in measured),
        reuse=_reuse(config, measured))


def _reuse(config: SimConfig, measured: list[Request]) -> ReuseStats | None:
    """Prefix reuse, prefill paths and TTFT by turn -- reported when conversations, kv-aware
    routing or conditional disaggregation are asked for."""
    if (config.workload.turns == 1 and config.routing is not RoutingPolicy.KV_AWARE
            and not config.conditional):
        return None
    done = [r for r in measured if r.done_s is not None and r.first_token_s is not None]
    disagg = config.serving.mode is ServingMode.DISAGGREGATED
    return ReuseStats(
        computed_prompt_tokens=sum(r.isl - r.cached for r in measured),
        kv_transfer_bytes=sum(r.kv_transfer_bytes for r in measured),
        num_local_prefills=sum(1 for r in measured if r.local_prefill),
        num_local_queued=sum(1 for r in measured if r.queued_local),
        num_remote_prefills=sum(1 for r in measured if disagg and not r.local_prefill),
        ttft_first_turn_s=np.array([r.first_token_s - r.arrival_s for r in done
                                    if r.turn == 0]),
        ttft_later_turns_s=np.array([r.first_token_s - r.arrival_s for r in done
                                     if r.turn > 0]))
