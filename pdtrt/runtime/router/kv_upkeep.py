"""The router's KV indexes kept up to date, and what they say a request would reuse.

With ``kv_aware`` routing every endpoint that publishes KV events has an index of the blocks
it holds (:mod:`pdtrt.runtime.router.kv_index`); :class:`KvUpkeep` polls each healthy one every
``kv_events_interval_s`` on the router's event loop (an endpoint that does not answer is
reported to the prober, which ejects a dead one and empties its index) and prices a request at
an endpoint: its net-new prompt tokens there, weighted, plus the work the endpoint still owes.
With ``kv_capacity`` routing it polls each healthy endpoint's KV capacity instead, on the same
interval, and prices a call at an endpoint by the used fraction of its KV blocks after it
(:mod:`pdtrt.runtime.router.kv_capacity`). Otherwise it keeps nothing and prices nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from pdtrt.client.streams import StreamClient
from pdtrt.engine_io import Role
from pdtrt.kv_blocks import block_hashes, reusable_blocks
from pdtrt.runtime.metrics import Metrics
from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router.config import RouterConfig
from pdtrt.runtime.router.health import Prober
from pdtrt.runtime.router.kv_capacity import poll_capacity
from pdtrt.runtime.router.kv_index import poll
from pdtrt.runtime.router.pool import Endpoint, EndpointPool, Routing

__all__ = ["KV_POLLED", "KvUpkeep", "capacity_cost"]

KV_POLLED = (Routing.KV_AWARE, Routing.KV_CAPACITY)  # routings that poll the engines

log = logging.getLogger(__name__)


class KvUpkeep:
    def __init__(self, config: RouterConfig, pools: Mapping[Role, EndpointPool], prober: Prober,
                 client_of: Callable[[Endpoint], StreamClient], metrics: Metrics,
                 labels_of: Callable[[Endpoint], dict[str, str]]) -> None:
        self.config, self.pools, self.prober, self.metrics = config, pools, prober, metrics
        self._client_of, self._labels_of = client_of, labels_of
        self._problems: dict[int, str] = {}  # id(endpoint) -> the last poll's problem
        self._hashes: dict[int, list[int]] = {}  # id(request) -> its prompt's block hashes

    @property
    def active(self) -> bool:
        return self.config.routing is Routing.KV_AWARE

    async def loop(self) -> None:
        """:meth:`refresh` every ``kv_events_interval_s``, until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self.config.kv_events_interval_s)

    async def refresh(self) -> None:
        """Read every healthy endpoint's KV events into its index (kv_aware) or its KV
        capacity (kv_capacity); an ejected endpoint's index stays empty."""
        healthy = [e for pool in self.pools.values() for e in pool.endpoints if e.healthy]
        if self.active:
            await asyncio.gather(*(self._poll(e) for e in healthy if e.kv.publishes),
                                 return_exceptions=True)
        elif self.config.routing is Routing.KV_CAPACITY:
            await asyncio.gather(*(self._poll_capacity(e) for e in healthy),
                                 return_exceptions=True)

    async def _poll(self, endpoint: Endpoint) -> None:
        problem = await self._ask(poll(self._client_of(endpoint), endpoint.spec.model,
                                       endpoint.kv, error_output=self.config.error_output),
                                  endpoint, "KV-events")
        if problem != self._problems.get(id(endpoint)):  # each new problem logged once
            if not endpoint.kv.publishes:
                log.info("endpoint %s publishes no KV events (block reuse is off there): "
                         "routed without its KV index", endpoint.label)
            elif problem is not None:
                log.warning("KV index of endpoint %s not updated: %s", endpoint.label, problem)
            self._problems[id(endpoint)] = problem or ""
        self.metrics.set("kv_blocks", endpoint.kv.num_blocks, **self._labels_of(endpoint))

    async def _poll_capacity(self, endpoint: Endpoint) -> None:
        problem = await self._ask(poll_capacity(self._client_of(endpoint), endpoint.spec.model,
                                                endpoint.capacity,
                                                error_output=self.config.error_output),
                                  endpoint, "KV-capacity")
        if problem != self._problems.get(id(endpoint)):  # each new problem logged once
            if problem is not None:
                log.warning("KV capacity of endpoint %s not read: %s", endpoint.label, problem)
            self._problems[id(endpoint)] = problem or ""

    async def _ask(self, answer: Awaitable[str | None], endpoint: Endpoint, what: str
                   ) -> str | None:
        """``answer``'s problem (None: none) within the probe timeout; an endpoint that does
        not answer is reported to the prober, which ejects a dead stub."""
        timeout_s = self.config.probe_timeout_s
        try:
            problem = await asyncio.wait_for(answer, timeout_s)
        except TimeoutError:
            problem = f"no {what} answer within {timeout_s:g} s"
        if problem is not None:
            self.prober.failed(endpoint, problem)  # a dead stub is ejected (and its index)
        return problem

    def cost(self, request: RouterRequest) -> Callable[[Endpoint], float] | None:
        """The cost of sending ``request`` to an endpoint (kv_aware routing): its net-new prompt
        tokens there, times ``kv_overlap_weight``, plus the tokens the endpoint still owes per
        instance. Dynamo's KV router weighs the same two terms (prefill blocks to compute,
        active blocks). With kv_capacity routing: the used fraction of the endpoint's KV blocks
        once the request's whole length is there. None for the other routings."""
        if self.config.routing is Routing.KV_CAPACITY:
            return capacity_cost(len(request.prompt) + request.max_new_tokens)
        if not self.active:
            return None
        weight, n = self.config.kv_overlap_weight, len(request.prompt)

        def cost(e: Endpoint) -> float:
            return weight * (n - self.cached(request, e)) + e.outstanding_tokens / e.spec.instances
        return cost

    def cached(self, request: RouterRequest, endpoint: Endpoint) -> int:
        """Prompt tokens of ``request`` that ``endpoint``'s KV index says it holds."""
        if not self.active:
            return 0
        hashes = self._hashes.get(id(request))
        if hashes is None:
            tpb = self.config.kv_block_tokens
            hashes = self._hashes[id(request)] = block_hashes(
                request.prompt, tpb, reusable_blocks(len(request.prompt), tpb))
        return endpoint.kv.overlap(hashes) * self.config.kv_block_tokens

    def forget(self, request: RouterRequest) -> None:
        """The request has ended: its block hashes go."""
        self._hashes.pop(id(request), None)


def capacity_cost(need_tokens: int) -> Callable[[Endpoint], float]:
    """The ``kv_capacity`` cost of a call that needs ``need_tokens`` of KV at an endpoint: its
    used fraction after the call (:mod:`pdtrt.runtime.router.kv_capacity`)."""
    def cost(e: Endpoint) -> float:
        return e.capacity.used_fraction(instances=e.spec.instances,
                                        reserved_tokens=e.reserved_tokens,
                                        need_tokens=need_tokens)
    return cost
