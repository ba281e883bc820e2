"""A request reaches the engines: route it to an entry replica (aggregated or prefill), queue it.

A replica's block cache (a workload ``shared_prefix`` once it prefilled one request, and the
prompts and answers of the conversations it served) gives a request its longest held prefix:
it starts prefilled by those tokens; its prefill chunks still attend to them
(:func:`pdtrt.perf.step.prefill_chunk_work` from ``prefilled``), and its KV transfer still
moves the whole prompt. With conditional disaggregation, the decode replica is chosen first;
when it would compute few enough prompt tokens, it prefills the request itself.

``time_s`` is when it reaches the engines: ``sent_s`` (when the client sent it) plus the fixed
per-request overhead outside the engine (:attr:`EfficiencyFactors.request_overhead_s`), which
counts in TTFT but occupies no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pdtrt.prefill_policy import Reason
from pdtrt.sim.entities import ReplicaRole
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
        if state.config.conditional and ReplicaRole.DECODE in state.replicas:
            decode = state.choose(ReplicaRole.DECODE, req)
            reason = state.local_prefill_reason(req, decode)
            if reason is not None:
                req.local_prefill, req.decode_replica = True, decode.index
                req.queued_local = reason is Reason.PREFILL_QUEUED
                req.prefilled = req.cached = state.cached_prefix(req, decode)
                req.decode_tokens = req.isl - req.cached + req.osl
                decode.outstanding_tokens += req.decode_tokens
                decode.local_waiting.append(req)
                state.want_schedule(ReplicaRole.DECODE, decode.index)
                return []
        replica = state.choose(state.entry_role, req)
        req.prefill_replica = replica.index
        # its block cache may hold a prefix of the prompt: those tokens are not computed again
        req.prefilled = req.cached = state.cached_prefix(req, replica)
        req.entry_tokens = req.isl - req.cached + (
            req.osl if replica.role is ReplicaRole.AGGREGATED else 0)
        replica.outstanding_tokens += req.entry_tokens
        replica.waiting.append(req)
        state.want_schedule(replica.role, replica.index)
        return []
