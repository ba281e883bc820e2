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
  for every later one (TensorRT-LLM's block reuse: whole blocks, at most ``isl - 1`` tokens).

For a seed, request ``i`` has the lengths ``pdtrt bench`` sends as request ``i`` and the
arrival schedule is bench's. This module produces request specs; it does not simulate them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.errors import WorkloadError
from pdtrt.workload.arrivals import ArrivalProcess, LoopKind, arrival_rng, arrival_times_s
from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.request_mix import RequestMix
from pdtrt.workload.trace import TraceEntry

__all__ = ["RequestSpec", "SimWorkload", "generate_requests"]


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    arrival_s: float
    isl: int
    osl: int


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

    def __post_init__(self) -> None:
        if self.shared_prefix < 0:
            raise WorkloadError(f"shared_prefix must be >= 0, got {self.shared_prefix}")
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

    def describe(self) -> str:
        """``"2 req/s poisson"``, ``"8 clients"`` or ``"trace of 300"``."""
        if self.replays_trace:
            return f"trace of {len(self.trace)}"
        if self.loop is LoopKind.CLOSED:
            return f"{self.concurrency} clients"
        return f"{self.rate_per_s:g} req/s {self.process}"


def generate_requests(w: SimWorkload, seed: int, num_requests: int) -> list[RequestSpec]:
    """The requests of one run, in arrival order (closed loop: all at 0, re-timed later)."""
    mix = w.mix(seed)
    if w.replays_trace:
        draws = [mix.draw(i) for i in range(min(num_requests, len(w.trace)))]
        times = [d.arrival_s or 0.0 for d in draws]
    else:
        draws = [mix.draw(i) for i in range(num_requests)]
        if w.loop is LoopKind.CLOSED:
            times = [0.0] * num_requests
        else:
            assert w.rate_per_s is not None
            times = list(arrival_times_s(w.process, w.rate_per_s, arrival_rng(seed),
                                         num_requests=num_requests))
    specs = [RequestSpec(arrival_s=t, isl=d.isl, osl=d.osl)
             for t, d in zip(times, draws, strict=True)]
    return sorted(specs, key=lambda r: r.arrival_s)
