"""The event protocol and the tie-break order of events that happen at the same time."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:
    from pdtrt.sim.state import SimState

__all__ = ["Event", "EventOrder"]


class EventOrder(IntEnum):
    """Lower runs first among events at the same simulated time."""

    STEP_END = 0
    KV_TRANSFER_END = 1
    REQUEST_ARRIVAL = 2
    REPLICA_SCHEDULE = 3


class Event(Protocol):
    """A handler changes the state and returns the events it causes directly; a replica that
    should look for work is recorded with :meth:`SimState.want_schedule` instead, and the
    event loop creates its :class:`ReplicaSchedule`."""

    time_s: float
    order: ClassVar[EventOrder]

    def handle(self, state: SimState) -> list[Event]: ...
