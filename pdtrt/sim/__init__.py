"""A discrete-event simulator of aggregated and disaggregated LLM serving (vidur-like).

The tree is the architecture: :mod:`~pdtrt.sim.entities` (requests, replicas, links),
``events/`` (one event type per module, each handler returning new events),
:mod:`~pdtrt.sim.state` (what a run mutates, and which replicas want a schedule),
:mod:`~pdtrt.sim.scheduling` (enum-keyed batch and routing policies), :mod:`~pdtrt.sim.simulator`
(the heap loop, the only creator of schedule events), :mod:`~pdtrt.sim.workload` (what arrives
when, from :mod:`pdtrt.workload`), :mod:`~pdtrt.sim.metrics` (the SLO verdict is
:func:`pdtrt.workload.evaluate_slo`, as in ``pdtrt bench``). Step times come from the
performance model (:mod:`pdtrt.perf.step`); randomness only from the run's seed.
"""

from pdtrt.sim.config import SimConfig
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.simulator import simulate
from pdtrt.sim.workload import SimWorkload

__all__ = ["BatchPolicy", "RoutingPolicy", "SimConfig", "SimResult", "SimWorkload", "simulate"]
