"""An idle replica looks for work: admit KV hand-offs (decode), then start a step if any."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from pdtrt.perf.step import step_time
from pdtrt.sim.entities import ReplicaRole
from pdtrt.sim.events.base import Event, EventOrder
from pdtrt.sim.events.kv_transfer_end import start_transfer
from pdtrt.sim.events.step_end import StepEnd
from pdtrt.sim.scheduling import form_batch

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["ReplicaSchedule"]


@dataclass(frozen=True, kw_only=True)
class ReplicaSchedule:
    order: ClassVar[EventOrder] = EventOrder.REPLICA_SCHEDULE
    time_s: float
    role: ReplicaRole
    index: int

    def handle(self, state: SimState) -> list[Event]:
        state.schedule_done(self.role, self.index)
        replica = state.replica(self.role, self.index)
        events: list[Event] = []
        if self.role is ReplicaRole.DECODE:
            # Reserve its KV (the capacity policy's share), then queue the pull on the link.
            link = state.links[self.index]
            while replica.waiting and replica.num_running + len(link.queue) + (
                    1 if link.busy else 0) < replica.instance.max_batch_size:
                if not replica.reserve(replica.waiting[0]):
                    break
                req = replica.waiting.popleft()
                link.queue.append(req)
            events += start_transfer(state, link)
        if replica.busy:
            return events
        batch = form_batch(state.config.batch_policy, replica)
        if batch is None:
            return events
        factors = (state.config.factors_decode if self.role is ReplicaRole.DECODE
                   else state.config.factors_prefill)
        duration = step_time(batch.work, replica.instance, factors).total_s
        replica.busy = True
        return events + [StepEnd(time_s=state.now_s + duration, role=self.role,
                                 index=self.index, batch=batch, duration_s=duration)]
