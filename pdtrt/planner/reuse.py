"""What the KV-aware router and conditional disaggregation buy on the planned configuration.

Two follow-ups of the search (:mod:`pdtrt.planner.search`), each a few more simulations of
one configuration on the request's own workload (same seed, so the same arrivals and lengths):

- :func:`compare_routing` -- when the workload has something for block reuse to find (a
  shared system prompt, several turns), every candidate was verified with ``kv_aware``
  routing; the chosen one is simulated again with ``least_load`` (the router's default), and
  the plan reports the prompt tokens each computes, TTFT and goodput: how much the KV-aware
  router buys on *this* workload.
- :func:`sweep_local_prefill` -- conditional disaggregation's thresholds for the spec's
  disaggregated configuration: simulated at each ``max_local_prefill_tokens`` of
  :data:`LOCAL_PREFILL_STEPS` up to the decode engine's ``max_num_tokens`` (a longer prompt is
  never prefilled locally: :mod:`pdtrt.prefill_policy`), then, with the threshold chosen, at
  each ``max_prefill_queue_depth`` of :data:`QUEUE_DEPTH_STEPS`. Each time the spec gets the
  value with the most goodput; within 1 % of it, the lowest TTFT at the SLO percentile; then
  the smallest (off first). When no prompt of the workload fits the decode engine's step,
  nothing is simulated and both stay 0, with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TypeVar

from pdtrt.planner.mixed import extra_label
from pdtrt.sim.config import SimConfig
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.workload.conversation import ConversationShape

__all__ = ["LOCAL_PREFILL_STEPS", "QUEUE_DEPTH_STEPS", "LocalPrefillSweep", "RoutingComparison",
           "SimRun", "compare_routing", "sweep_local_prefill"]

LOCAL_PREFILL_STEPS = (0, 64, 128, 256, 512, 1024, 2048, 4096)
QUEUE_DEPTH_STEPS = (0, 2, 4, 8)  # requests held by the least loaded prefill instance
GOODPUT_TIE = 0.01  # goodputs within 1 % are a tie, broken by TTFT

Simulate = Callable[[SimConfig], SimResult]
Number = TypeVar("Number", int, float)


@dataclass(frozen=True, kw_only=True)
class SimRun:
    """One simulation's figures that the follow-ups compare."""

    prompt_tokens: int
    computed_prompt_tokens: int
    ttft_p50_ms: float | None
    ttft_at_slo_ms: float | None
    goodput_req_per_s: float
    slo_met: bool
    local_prefills: int = 0
    remote_prefills: int = 0

    @classmethod
    def of(cls, sim: SimResult) -> SimRun:
        ttft = sim.ttft_ms
        return cls(prompt_tokens=sim.prompt_tokens,
                   computed_prompt_tokens=sim.prompt_tokens - sim.cached_prompt_tokens,
                   ttft_p50_ms=ttft.p50, ttft_at_slo_ms=ttft.at(sim.slo.percentile),
                   goodput_req_per_s=sim.goodput_req_per_s, slo_met=sim.slo_met,
                   local_prefills=sim.reuse.num_local_prefills if sim.reuse else 0,
                   remote_prefills=sim.reuse.num_remote_prefills if sim.reuse else 0)

    def to_dict(self) -> dict[str, object]:
        return {"prompt_tokens": self.prompt_tokens,
                "computed_prompt_tokens": self.computed_prompt_tokens,
                "ttft_p50_ms": self.ttft_p50_ms, "ttft_at_slo_ms": self.ttft_at_slo_ms,
                "goodput_req_per_s": self.goodput_req_per_s, "slo_met": self.slo_met,
                "local_prefills": self.local_prefills, "remote_prefills": self.remote_prefills}


@dataclass(frozen=True, kw_only=True)
class RoutingComparison:
    config: str  # the configuration's label
    runs: dict[str, SimRun]  # by the router's spelling: kv_aware and least_load
    has_choice: bool  # some pool has two replicas or more (else routing cannot differ)

    @property
    def computed_saved_share(self) -> float:
        """Share of least_load's computed prompt tokens that kv_aware does not compute."""
        base = self.runs["least_load"].computed_prompt_tokens
        return 1 - self.runs["kv_aware"].computed_prompt_tokens / base if base else 0.0

    def to_dict(self) -> dict[str, object]:
        return {"config": self.config, "computed_saved_share": self.computed_saved_share,
                "has_choice": self.has_choice,
                "runs": {k: v.to_dict() for k, v in self.runs.items()}}


@dataclass(frozen=True, kw_only=True)
class LocalPrefillSweep:
    config: str
    decode_max_num_tokens: int
    runs: dict[int, SimRun]  # by max_local_prefill_tokens (empty: nothing fits)
    chosen: int
    why: str
    queue_runs: dict[float, SimRun] = field(default_factory=dict)  # by max_prefill_queue_depth
    chosen_queue_depth: float = 0

    def to_dict(self) -> dict[str, object]:
        return {"config": self.config, "decode_max_num_tokens": self.decode_max_num_tokens,
                "chosen": self.chosen, "chosen_queue_depth": self.chosen_queue_depth,
                "why": self.why, "runs": {str(k): v.to_dict() for k, v in self.runs.items()},
                "queue_runs": {str(k): v.to_dict() for k, v in self.queue_runs.items()}}


def _label(base: SimConfig) -> str:
    """The simulated configuration's label, a mixed decode pool's other replicas included."""
    return base.serving.label() + extra_label(base.extra_decode)


def compare_routing(base: SimConfig, kv_aware: SimResult,
                    simulate: Simulate) -> RoutingComparison:
    """``base`` (already simulated with kv_aware routing: ``kv_aware``) again with
    least_load routing on the same workload and seed."""
    config = base.serving
    least = simulate(replace(base, routing=RoutingPolicy.LEAST_LOADED))
    choice = config.prefill_instances > 1 or (config.decode is not None
                                              and config.decode_instances > 1)
    return RoutingComparison(config=_label(base), has_choice=choice, runs={
        "kv_aware": SimRun.of(kv_aware), "least_load": SimRun.of(least)})


def _better(a: tuple[float, SimRun], b: tuple[float, SimRun]) -> bool:
    """Whether threshold/run ``a`` beats ``b`` (see module doc)."""
    (ta, ra), (tb, rb) = a, b
    if ra.slo_met != rb.slo_met:
        return ra.slo_met
    top = max(ra.goodput_req_per_s, rb.goodput_req_per_s)
    if abs(ra.goodput_req_per_s - rb.goodput_req_per_s) > GOODPUT_TIE * top:
        return ra.goodput_req_per_s > rb.goodput_req_per_s
    inf = float("inf")
    la, lb = ra.ttft_at_slo_ms or inf, rb.ttft_at_slo_ms or inf
    return la < lb if la != lb else ta < tb


def sweep_local_prefill(base: SimConfig, verified: SimResult, shape: ConversationShape,
                        simulate: Simulate) -> LocalPrefillSweep:
    """The thresholds of conditional disaggregation for ``base``'s disaggregated
    configuration, whose run without them is ``verified``."""
    config = base.serving
    assert config.decode is not None and not base.conditional
    limit = config.decode.max_num_tokens
    label = _label(base)
    if shape.isl > limit:  # turn 0 is every conversation's shortest prompt
        return LocalPrefillSweep(
            config=label, decode_max_num_tokens=limit, runs={}, chosen=0,
            why=f"no prompt fits the decode engine's step (max_num_tokens {limit} < the "
                f"shortest prompt, {shape.isl} tokens): every request is prefilled remotely")
    steps = [t for t in LOCAL_PREFILL_STEPS if t <= limit]
    # past the longest prompt a larger threshold changes nothing
    longer = [t for t in steps if t >= shape.longest_prompt]
    steps = [t for t in steps if t < shape.longest_prompt] + longer[:1]
    runs = {t: SimRun.of(verified if t == 0 else
                         simulate(replace(base, max_local_prefill_tokens=t))) for t in steps}
    chosen = _best(runs)
    queue_runs = {d: runs[chosen] if d == 0 else SimRun.of(simulate(replace(
        base, max_local_prefill_tokens=chosen, max_prefill_queue_depth=d)))
        for d in QUEUE_DEPTH_STEPS}
    depth = _best(queue_runs)
    run = queue_runs[depth]
    pct = base.slo.percentile.label
    why = (f"of {', '.join(map(str, runs))} net-new tokens and queue depths "
           f"{', '.join(map(str, queue_runs))} simulated, {chosen} tokens and depth {depth} "
           f"serve best: goodput {run.goodput_req_per_s:.2f} req/s, TTFT {pct} "
           f"{run.ttft_at_slo_ms or float('nan'):.0f} ms, {run.local_prefills} of "
           f"{run.local_prefills + run.remote_prefills} prefills local")
    if run.local_prefills and not run.remote_prefills:
        why += ("; every prompt local leaves the prefill pool idle -- the decode pool "
                "aggregated, without it, is the same service for less")
    return LocalPrefillSweep(config=label, decode_max_num_tokens=limit, runs=runs,
                             chosen=chosen, why=why, queue_runs=queue_runs,
                             chosen_queue_depth=depth)


def _best(runs: Mapping[Number, SimRun]) -> Number:
    """The value whose run is best (:func:`_better`), the smallest first among equals."""
    best = min(runs.items(), key=lambda item: item[0])
    for item in runs.items():
        if _better(item, best):
            best = item
    return best[0]
