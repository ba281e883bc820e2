"""A request reaches the engines: route it to an entry replica (aggregated or prefill), queue it.

With a workload ``shared_prefix``, a replica that has prefilled one request with it keeps its
KV blocks (block reuse), so a later request starts prefilled by those tokens; its prefill
chunks still attend to them (:func:`pdtrt.perf.step.prefill_chunk_work` from ``prefilled``),
and its KV transfer still moves the whole prompt.

``time_s`` is when it reaches the engines: ``sent_s`` (when the client sent it) plus the fixed
per-request overhead outside the engine (:attr:`EfficiencyFactors.request_overhead_s`), which
counts in TTFT but occupies no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pdtrt.sim.events.base import Event, EventOrder
from pdtrt.sim.workload import RequestSpec

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["RequestArrival"]


@dataclass(frozen=True, kw_only=True)
class RequestArrival:
    order: ClassVar[EventOrder] = EventOrder.REQUEST_ARRIVAL
    time_s: float
    sent_s: float
    spec: RequestSpec

    @classmethod
    def sent(cls, spec: RequestSpec, sent_s: float, state: SimState) -> RequestArrival:
        """The arrival of a request the client sends at ``sent_s``."""
        return cls(time_s=sent_s + state.request_overhead_s, sent_s=sent_s, spec=spec)

    def handle(self, state: SimState) -> list[Event]:
        req = state.new_request(self.spec, sent_s=self.sent_s)
        replica = state.route_entry(state.replicas[state.entry_role])
        req.prefill_replica = replica.index
        if replica.prefix_warm:  # its block cache holds the shared prefix: not computed again
            req.prefilled = req.cached = state.cached_prefix(req, replica)
        replica.waiting.append(req)
        state.want_schedule(replica.role, replica.index)
        return []
