"""What a simulation run receives: which requests arrive, and when.

A simulated workload is the shared vocabulary of :mod:`pdtrt.workload` -- length
distributions, a trace, open or closed loop, the arrival process -- put together for one run:

- open loop at ``rate_per_s``: arrival times from :func:`pdtrt.workload.arrival_times_s`
  (first request at t = 0), request ``i``'s lengths from :class:`pdtrt.workload.RequestMix`
  (a trace, when given, supplies lengths only, cycled);
- open loop without a rate, with a trace whose entries carry ``arrival_s``: the trace's first
  ``num_requests`` entries replayed at their own times;
- closed loop: ``concurrency`` clients that all start at t = 0 and send their next request
  when their last one ends (the simulator re-times those arrivals);
- ``shared_prefix``: tokens of a system prompt every request starts with; an entry replica
  (aggregated or prefill) that has prefilled one such request reuses those tokens' KV blocks
  for every later one (TensorRT-LLM's block reuse: whole blocks, at most ``isl - 1`` tokens);
- ``turns``: the arrival process starts *conversations*; turn ``k > 0`` of one is sent
  ``think_s`` after turn ``k - 1``'s last token, and its prompt is the conversation so far
  (turn ``k - 1``'s prompt and answer) plus new tokens drawn from ``followup_isl`` (default:
  ``isl``). Turn 0 is today's request (``shared_prefix`` within its ``isl``). Conversation
  ``c``'s turn ``k`` draws its lengths as request ``c * turns + k``, so ``turns = 1`` is the
  single-request workload exactly; ``num_requests`` counts turns (the last conversation may
  be cut short).

For a seed, request ``i`` has the lengths ``pdtrt bench`` sends as request ``i`` and the
arrival schedule is bench's. This module produces request specs; it does not simulate them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.errors import WorkloadError
from pdtrt.workload.arrivals import ArrivalProcess, LoopKind, arrival_rng, arrival_times_s
from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.request_mix import RequestMix
from pdtrt.workload.trace import TraceEntry

__all__ = ["Conversation", "RequestSpec", "SimWorkload", "generate_conversations",
           "generate_requests"]


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    """One request: ``isl`` is its whole prompt (a later turn's includes the history);
    ``arrival_s`` is its conversation's start (a later turn is sent when the previous one ends
    plus the think time, which only the simulation knows)."""

    arrival_s: float
    isl: int
    osl: int
    conversation: int = 0
    turn: int = 0


Conversation = tuple[RequestSpec, ...]  # its turns, in order


@dataclass(frozen=True, kw_only=True)
class SimWorkload:
    """The workload one simulation run replays: request lengths, open or closed loop, the
    arrival process and rate (or a trace's own times); :func:`generate_requests` turns it into
    timed requests."""

    isl: LengthDist
    osl: LengthDist
    loop: LoopKind = LoopKind.OPEN
    process: ArrivalProcess = ArrivalProcess.POISSON
    rate_per_s: float | None = None  # open loop; None with a timed trace: replay its times
    concurrency: int | None = None  # closed loop
    trace: tuple[TraceEntry, ...] = ()
    # prompt tokens every request starts with (a system prompt), which an engine with block
    # reuse keeps after its first request with them (pdtrt.sim.events.request_arrival)
    shared_prefix: int = 0
    turns: int = 1  # requests per conversation
    think_s: float = 0.0  # from a turn's last token to the next turn's send
    followup_isl: LengthDist | None = None  # new tokens of turns > 0 (None: ``isl``)

    def __post_init__(self) -> None:
        if self.shared_prefix < 0:
            raise WorkloadError(f"shared_prefix must be >= 0, got {self.shared_prefix}")
        if self.turns < 1:
            raise WorkloadError(f"turns must be >= 1, got {self.turns}",
                                hint="--turns 1 is one request per conversation")
        if not math.isfinite(self.think_s) or self.think_s < 0:
            raise WorkloadError(f"think_s must be a finite number >= 0, got {self.think_s}")
        if self.turns == 1 and (self.think_s > 0 or self.followup_isl is not None):
            raise WorkloadError("think time and follow-up lengths need conversations of more "
                                "than one turn", hint="pass --turns N with N > 1")
        if self.loop is LoopKind.CLOSED and not self.concurrency:
            raise WorkloadError("closed-loop arrivals need a concurrency",
                                hint="pass --concurrency C")
        if self.loop is LoopKind.OPEN and not self.rate_per_s and not self.replays_trace:
            if self.trace:
                raise WorkloadError("the trace has no arrival_s to replay and no request rate "
                                    "is given", hint="add arrival_s to every entry, or pass "
                                    "--rate R or --concurrency C")
            raise WorkloadError(f"{self.process} arrivals need a request rate",
                                hint="pass --rate R (requests per second)")

    @property
    def replays_trace(self) -> bool:
        """Open loop at the trace's own times (no rate given, every entry timed)."""
        return (self.loop is LoopKind.OPEN and not self.rate_per_s and bool(self.trace)
                and self.trace[0].arrival_s is not None)

    def mix(self, seed: int) -> RequestMix:
        return RequestMix(isl=self.isl, osl=self.osl, seed=seed, trace=self.trace)

    def followup_mix(self, seed: int) -> RequestMix:
        """The draws of turns > 0 (their new tokens and answers)."""
        return RequestMix(isl=self.followup_isl or self.isl, osl=self.osl, seed=seed,
                          trace=self.trace)

    def max_prompt_tokens(self, seed: int) -> int:
        """The longest prompt of a run: the last turn's, history included."""
        mix, follow = self.mix(seed), self.followup_mix(seed)
        return mix.max_isl + (self.turns - 1) * (follow.max_isl + max(mix.max_osl,
                                                                      follow.max_osl))

    def max_osl(self, seed: int) -> int:
        return max(self.mix(seed).max_osl, self.followup_mix(seed).max_osl)

    def describe(self) -> str:
        """``"2 req/s poisson"``, ``"8 clients"`` or ``"trace of 300"``."""
        if self.replays_trace:
            return f"trace of {len(self.trace)}"
        if self.loop is LoopKind.CLOSED:
            load = f"{self.concurrency} clients"
        else:
            load = f"{self.rate_per_s:g} req/s {self.process}"
        if self.turns > 1:
            return f"{load}, conversations of {self.turns} turns, think {self.think_s:g} s"
        return load


def _start_times(w: SimWorkload, seed: int, num: int) -> list[float]:
    """When each of ``num`` conversations starts (closed loop: all at 0, re-timed later)."""
    if w.replays_trace:
        mix = w.mix(seed)
        return [mix.draw(i).arrival_s or 0.0 for i in range(min(num, len(w.trace)))]
    if w.loop is LoopKind.CLOSED:
        return [0.0] * num
    assert w.rate_per_s is not None
    return list(arrival_times_s(w.process, w.rate_per_s, arrival_rng(seed), num_requests=num))


def generate_conversations(w: SimWorkload, seed: int, num_requests: int) -> list[Conversation]:
    """The conversations of one run (``num_requests`` turns in all), by start time."""
    mix, follow = w.mix(seed), w.followup_mix(seed)
    num = -(-num_requests // w.turns)
    out = []
    for c, start in enumerate(_start_times(w, seed, num)):
        turns: list[RequestSpec] = []
        for k in range(min(w.turns, num_requests - c * w.turns)):
            d = (mix if k == 0 else follow).draw(c * w.turns + k)
            history = turns[-1].isl + turns[-1].osl if turns else 0
            turns.append(RequestSpec(arrival_s=start, isl=history + d.isl, osl=d.osl,
                                     conversation=c, turn=k))
        out.append(tuple(turns))
    return sorted(out, key=lambda conv: conv[0].arrival_s)


def generate_requests(w: SimWorkload, seed: int, num_requests: int) -> list[RequestSpec]:
    """The first turns of one run's conversations, in arrival order (with ``turns = 1``: every
    request)."""
    return [conv[0] for conv in generate_conversations(w, seed, num_requests)]
