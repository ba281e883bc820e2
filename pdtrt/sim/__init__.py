"""A discrete-event simulator of aggregated and disaggregated LLM serving (vidur-like).

The tree is the architecture: :mod:`~pdtrt.sim.entities` (requests, replicas, links),
``events/`` (one event type per module, each handler returning new events),
:mod:`~pdtrt.sim.scheduling` (enum-keyed batch and routing policies), :mod:`~pdtrt.sim.simulator`
(the heap loop), :mod:`~pdtrt.sim.workload` (arrivals, lengths), :mod:`~pdtrt.sim.metrics`.
Step times come from the performance model (:mod:`pdtrt.perf.step`); randomness only from the
injected, seeded generator.
"""

from pdtrt.sim.config import SimConfig, SloTarget
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.simulator import simulate
from pdtrt.sim.workload import ArrivalKind, LengthDist, LengthKind, Workload

__all__ = ["ArrivalKind", "BatchPolicy", "LengthDist", "LengthKind", "RoutingPolicy",
           "SimConfig", "SimResult", "SloTarget", "Workload", "simulate"]
