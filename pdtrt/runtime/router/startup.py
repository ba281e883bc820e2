"""The router's background work, started on its event loop at the first request.

Triton calls ``initialize`` before the router's event loop runs, so the background tasks start
with the first ``execute``: the health probes of every endpoint
(:func:`pdtrt.runtime.router.health.health_loop`, every ``probe_interval_s``; none when 0) and,
with ``kv_aware`` or ``kv_capacity`` routing, the KV polls
(:meth:`~pdtrt.runtime.router.kv_upkeep.KvUpkeep.loop`, restarted if it ended). The router's
drain cancels them (:attr:`Background.tasks`), and starts nothing after.
"""

from __future__ import annotations

import asyncio

from pdtrt.runtime.router.calls import PhaseCalls
from pdtrt.runtime.router.health import health_loop
from pdtrt.runtime.router.kv_upkeep import KV_POLLED

__all__ = ["Background"]


class Background:
    def __init__(self, calls: PhaseCalls) -> None:
        self.calls = calls
        self._health: asyncio.Task[None] | None = None
        self._kv: asyncio.Task[None] | None = None

    def start(self) -> None:
        """The probes and the KV polls, on the running event loop, unless they run."""
        config = self.calls.config
        loop = asyncio.get_running_loop()
        if self._health is None and config.probe_interval_s > 0:
            endpoints = [e for pool in self.calls.pools.values() for e in pool.endpoints]
            self._health = loop.create_task(health_loop(
                self.calls.prober, endpoints, interval_s=config.probe_interval_s))
        if (self._kv is None or self._kv.done()) and config.routing in KV_POLLED:
            self._kv = loop.create_task(self.calls.kv.loop())

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for t in (self._health, self._kv) if t is not None]
