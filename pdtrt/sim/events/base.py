"""The event protocol and the tie-break order of events that happen at the same time."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["Event", "EventOrder", "wake"]


class EventOrder(IntEnum):
    """Lower runs first among events at the same simulated time."""

    STEP_END = 0
    KV_TRANSFER_END = 1
    REQUEST_ARRIVAL = 2
    REPLICA_SCHEDULE = 3


class Event(Protocol):
    time_s: float
    order: ClassVar[EventOrder]

    def handle(self, state: SimState) -> list[Event]: ...


def wake(state: SimState, role, index: int) -> list[Event]:
    """A schedule event for a replica, unless one is pending or it is busy stepping. Decode
    replicas are woken while busy too: they admit KV hand-offs between steps' ends."""
    from pdtrt.sim.entities import ReplicaRole
    from pdtrt.sim.events.replica_schedule import ReplicaSchedule

    key = (role, index)
    busy = state.replica(role, index).busy and role is not ReplicaRole.DECODE
    if key in state.scheduled or busy:
        return []
    state.scheduled.add(key)
    return [ReplicaSchedule(time_s=state.now_s, role=role, index=index)]
