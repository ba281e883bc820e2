"""A replica's step ends: advance prefill chunks, emit tokens, finish or hand off requests.

A replica keeps the blocks of what it served for reuse: the prompt once prefilled, the prompt
and answer when a request ends there. A finished turn sends its conversation's next turn after
the think time; a finished conversation lets a closed-loop client start its next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pdtrt.sim.entities import Replica, ReplicaRole, Request
from pdtrt.sim.events.base import Event, EventOrder
from pdtrt.sim.events.request_arrival import RequestArrival
from pdtrt.sim.scheduling import Batch

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["StepEnd"]


def _finish(state: SimState, replica: Replica, req: Request) -> list[Event]:
    req.done_s = state.now_s
    if replica.role is ReplicaRole.AGGREGATED:
        replica.outstanding_tokens -= req.entry_tokens
    elif replica.role is ReplicaRole.DECODE:
        replica.outstanding_tokens -= req.decode_tokens
    if replica.role is not ReplicaRole.PREFILL:  # its KV holds the answer too (less the last)
        replica.hold(req, req.isl + req.osl - 1)
        if state.config.workload.shared_prefix:
            replica.prefix_warm = True
    nxt = state.next_turn(req)
    if nxt is not None:  # the user reads the answer, then sends the next turn
        return [RequestArrival.sent(nxt, state.now_s + state.config.workload.think_s, state)]
    if state.closed_loop_backlog:  # closed loop: this client starts its next conversation
        return [RequestArrival.sent(state.closed_loop_backlog.popleft()[0], state.now_s,
                                    state)]
    return []


@dataclass(frozen=True, kw_only=True)
class StepEnd:
    order: ClassVar[EventOrder] = EventOrder.STEP_END
    time_s: float
    role: ReplicaRole
    index: int
    batch: Batch
    duration_s: float

    def handle(self, state: SimState) -> list[Event]:
        now = state.now_s
        replica = state.replica(self.role, self.index)
        replica.busy = False
        replica.busy_s += self.duration_s
        replica.num_steps += 1
        events: list[Event] = []
        finished: list[Request] = []
        for req in self.batch.decodes:
            assert req.last_token_s is not None
            itl = now - req.last_token_s
            state.record_itl(itl)
            req.max_itl_s = max(req.max_itl_s, itl)
            req.generated += 1
            req.last_token_s = now
            if req.generated >= req.osl:
                finished.append(req)
        for req, tokens in self.batch.chunks:
            req.prefilled += tokens
            if req.prefill_left > 0:
                continue
            if req.replay:  # paused and prefilled again: it decodes on from where it was
                req.prefilled, req.replay = req.isl, 0
                replica.prefilling.remove(req)
                replica.decoding.append(req)
                continue
            req.generated, req.first_token_s, req.last_token_s = 1, now, now
            replica.prefilling.remove(req)
            if state.config.workload.shared_prefix:
                replica.prefix_warm = True
            replica.hold(req, req.isl)
            if self.role is ReplicaRole.PREFILL:
                replica.outstanding_tokens -= req.entry_tokens
            if req.osl <= 1:
                if self.role is ReplicaRole.PREFILL:
                    replica.used_blocks -= replica.prefill_blocks_for(req)
                else:
                    replica.release(req)
                events += _finish(state, replica, req)
            elif self.role is ReplicaRole.PREFILL:
                decode = state.choose(ReplicaRole.DECODE, req)
                req.decode_replica = decode.index
                req.decode_tokens = req.osl
                decode.outstanding_tokens += req.decode_tokens
                decode.waiting.append(req)
                state.want_schedule(ReplicaRole.DECODE, decode.index)
            else:
                replica.decoding.append(req)
        for req in finished:
            replica.decoding.remove(req)
            replica.release(req)
            events += _finish(state, replica, req)
        state.want_schedule(self.role, self.index)
        return events
