"""The simulator's events, one type per module. Each ``handle(state)`` returns the events it
causes; a replica that should look for work is recorded on the state
(:meth:`~pdtrt.sim.state.SimState.want_schedule`) and the event loop creates its
:class:`ReplicaSchedule` -- the state never creates events.

Events at the same time run in :class:`~pdtrt.sim.events.base.EventOrder` (a step end frees
KV blocks before an arrival asks for them; scheduling runs last, so every request that arrived
at that instant joins the same step), then in the order they were created.
"""

from pdtrt.sim.events.base import Event, EventOrder
from pdtrt.sim.events.kv_transfer_end import KVTransferEnd
from pdtrt.sim.events.replica_schedule import ReplicaSchedule
from pdtrt.sim.events.request_arrival import RequestArrival
from pdtrt.sim.events.step_end import StepEnd

__all__ = ["Event", "EventOrder", "KVTransferEnd", "ReplicaSchedule", "RequestArrival",
           "StepEnd"]
