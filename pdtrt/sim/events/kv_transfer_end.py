"""A KV cache has crossed the link: free it on the prefill side, start decoding it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pdtrt.sim.entities import Link, ReplicaRole, Request
from pdtrt.sim.events.base import Event, EventOrder

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["KVTransferEnd", "start_transfer"]


def start_transfer(state: SimState, link: Link) -> list[Event]:
    """Start the next queued transfer on ``link`` if it is idle (FIFO)."""
    if link.busy or not link.queue:
        return []
    req = link.queue.popleft()
    duration = state.kv_transfer_s(req)
    link.busy = True
    req.kv_transfer_start_s = state.now_s
    req.kv_transfer_bytes = req.isl * state.kv_bytes_per_token
    return [KVTransferEnd(time_s=state.now_s + duration, link=link.index, request=req,
                          duration_s=duration)]


@dataclass(frozen=True, kw_only=True)
class KVTransferEnd:
    order: ClassVar[EventOrder] = EventOrder.KV_TRANSFER_END
    time_s: float
    link: int
    request: Request
    duration_s: float

    def handle(self, state: SimState) -> list[Event]:
        link = state.links[self.link]
        link.busy = False
        link.busy_s += self.duration_s
        link.num_transfers += 1
        req = self.request
        req.kv_ready_s = state.now_s
        assert req.prefill_replica is not None and req.decode_replica is not None
        prefill = state.replica(ReplicaRole.PREFILL, req.prefill_replica)
        prefill.used_blocks -= prefill.prefill_blocks_for(req)
        decode = state.replica(ReplicaRole.DECODE, req.decode_replica)
        decode.decoding.append(req)
        state.want_schedule(ReplicaRole.PREFILL, prefill.index)
        state.want_schedule(ReplicaRole.DECODE, decode.index)
        return start_transfer(state, link)
