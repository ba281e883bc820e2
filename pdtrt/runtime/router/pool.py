"""The endpoints a router pool may send a phase to, their load and their health.

An **endpoint** is one place that serves a phase model: a model of this Triton server (called
over BLS) or the model of another Triton server (``MODEL@HOST:PORT``, called over gRPC), with
the number of model instances behind it. A **pool** is the list of endpoints of one phase
(prefill, decode, or the aggregated path). The router's model parameters name them in one
line each (:mod:`pdtrt.endpoints`).

:class:`EndpointPool` chooses per request a *healthy* endpoint -- never an ejected one -- by its
routing (:class:`Routing`): by default the one with the least outstanding work per instance
(tokens the router still expects from it, then requests), the least recently chosen first among
equals, so load spreads over the pool; round robin; or KV-aware: the least cost the router
computes from the endpoint's KV index (:mod:`pdtrt.runtime.router.kv_index`: the prompt's tokens
it would have to prefill there) and its load, so a request goes where its prefix is cached
unless that endpoint is loaded more than the prefill it saves; or by KV capacity: the least
fraction of its KV blocks in use after the request (:mod:`pdtrt.runtime.router.kv_capacity`),
so endpoints of different sizes -- a decode pool mixing GPU types -- fill in proportion and
none gets a request it cannot hold while another can. An endpoint is **ejected** when a
health probe fails (it did not answer a cheap request in time, or answered it with an error -- a
dead Python-backend stub answers "Stub process ... is not healthy") and **re-admitted** when a
probe succeeds again. An endpoint that answers its probe with "draining" (docs/drain.md) is
out of its pools as well, as **draining** -- not a failure: it finishes what it has in flight,
its probes are not backed off, and it comes back when it answers a probe plainly again.
Probing itself is :mod:`pdtrt.runtime.router.health`'s business; this
module is plain state, owned by the router's event loop, with times passed in (``now_s``) -- no
Triton, no clock, no threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum

from pdtrt.endpoints import EndpointSpec
from pdtrt.enums import Routing
from pdtrt.runtime.router.kv_capacity import KvCapacity
from pdtrt.runtime.router.kv_index import KvIndex

__all__ = ["Endpoint", "EndpointPool", "EndpointState", "Routing", "eject", "mark_draining",
           "outstanding", "readmit"]


class EndpointState(StrEnum):
    HEALTHY = "healthy"
    EJECTED = "ejected"  # a failure: it did not answer, or answered with an error
    DRAINING = "draining"  # it answers, but takes no new requests (docs/drain.md)


@dataclass(eq=False, kw_only=True)
class Endpoint:
    """One endpoint's live state: its load as the router sees it, and its health."""

    spec: EndpointSpec
    state: EndpointState = EndpointState.HEALTHY
    num_outstanding: int = 0  # phase calls in flight
    outstanding_tokens: int = 0  # tokens those calls still stand for
    problem: str = ""  # why it was ejected
    changed_s: float = 0.0  # when the state last changed (the caller's clock)
    num_failed_probes: int = 0  # failures (probes, dead stub) since it last answered a probe
    failed_s: float = 0.0  # when the last of them was
    answered_s: float = -math.inf  # when one of its calls last sent a response
    num_chosen: int = 0  # requests sent to it
    last_chosen: int = -1  # the pool's choice counter when it was last chosen
    kv: KvIndex = field(default_factory=KvIndex)  # its blocks, when the pool routes by KV
    reserved_tokens: int = 0  # KV tokens its calls in flight will hold at their end
    capacity: KvCapacity = field(default_factory=KvCapacity)  # kv_capacity routing's view

    def __post_init__(self) -> None:
        self.kv.instances = self.spec.instances

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def healthy(self) -> bool:
        return self.state is EndpointState.HEALTHY

    def load(self) -> tuple[float, float]:
        return (self.outstanding_tokens / self.spec.instances,
                self.num_outstanding / self.spec.instances)


_BY_COST = (Routing.KV_AWARE, Routing.KV_CAPACITY)  # routings that rank by the router's cost


@dataclass(kw_only=True)
class EndpointPool:
    """The endpoints of one phase; see the module docstring for the choice."""

    phase: str
    endpoints: Sequence[Endpoint]
    routing: Routing = Routing.LEAST_LOAD
    _num_choices: int = field(default=0, repr=False)

    def choose(self, exclude: Iterable[Endpoint] = (),
               cost: Callable[[Endpoint], float] | None = None) -> Endpoint | None:
        """The healthy endpoint not in ``exclude`` that the pool's routing picks -- for
        ``kv_aware`` and ``kv_capacity``, the least ``cost`` (the router's: net-new tokens
        weighted plus load; the used fraction of its KV blocks after the request), then the
        least load -- or None when there is none."""
        best = self.pick(exclude, cost)
        if best is not None:
            best.last_chosen = self._num_choices
            best.num_chosen += 1
            self._num_choices += 1
        return best

    def pick(self, exclude: Iterable[Endpoint] = (),
             cost: Callable[[Endpoint], float] | None = None) -> Endpoint | None:
        """The endpoint :meth:`choose` would choose, without counting it as chosen."""
        skip = set(map(id, exclude))
        candidates = [e for e in self.endpoints if e.healthy and id(e) not in skip]
        if not candidates:
            return None
        if self.routing is Routing.ROUND_ROBIN:
            return min(candidates, key=lambda e: e.last_chosen)
        if self.routing in _BY_COST and cost is not None:
            return min(candidates, key=lambda e: (cost(e), *e.load(), e.last_chosen))
        return min(candidates, key=lambda e: (*e.load(), e.last_chosen))

    @property
    def healthy(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.healthy]

    @property
    def ejected(self) -> list[Endpoint]:
        return [e for e in self.endpoints if not e.healthy]

    def describe(self) -> str:
        """Each endpoint and its state, for an error message: ``decode (ejected: ...)``."""
        return ", ".join(e.label if e.healthy else f"{e.label} ({e.state}: {e.problem})"
                         for e in self.endpoints)


@contextmanager
def outstanding(endpoint: Endpoint, tokens: int, kv_tokens: int = 0) -> Iterator[None]:
    """Count one phase call (standing for ``tokens`` tokens, holding ``kv_tokens`` of KV at its
    end) as in flight at ``endpoint``."""
    endpoint.num_outstanding += 1
    endpoint.outstanding_tokens += tokens
    endpoint.reserved_tokens += kv_tokens
    try:
        yield
    finally:
        endpoint.num_outstanding -= 1
        endpoint.outstanding_tokens -= tokens
        endpoint.reserved_tokens -= kv_tokens


def eject(endpoint: Endpoint, problem: str, now_s: float) -> bool:
    """Take ``endpoint`` out of its pools; True when it was healthy until now."""
    endpoint.problem, endpoint.failed_s = problem, now_s
    endpoint.num_failed_probes += 1
    if endpoint.state is EndpointState.EJECTED:
        return False
    endpoint.state, endpoint.changed_s = EndpointState.EJECTED, now_s
    endpoint.kv.clear()  # its engine may come back empty (or as another epoch)
    endpoint.capacity.clear()  # or another size
    return True


def mark_draining(endpoint: Endpoint, problem: str, now_s: float) -> bool:
    """Take ``endpoint`` out of its pools as draining (``problem``: what it answered), not as a
    failure; True when it was healthy until now."""
    endpoint.num_failed_probes, endpoint.problem = 0, problem
    if endpoint.state is EndpointState.DRAINING:
        return False
    was_healthy = endpoint.healthy
    endpoint.state, endpoint.changed_s = EndpointState.DRAINING, now_s
    return was_healthy


def readmit(endpoint: Endpoint, now_s: float) -> bool:
    """Put ``endpoint`` back; True when it was ejected until now."""
    endpoint.num_failed_probes = 0
    if endpoint.state is EndpointState.HEALTHY:
        return False
    endpoint.state, endpoint.changed_s, endpoint.problem = EndpointState.HEALTHY, now_s, ""
    return True
