"""Whether a phase endpoint is alive: health probes, ejection and re-admission, and the
liveness deadline of every phase call.

A phase whose process died or hangs does not say so: Triton 2.51 never ends a BLS stream whose
callee's stub was killed (its ``next()`` blocks for good), and a remote server's model can stop
answering on a connection that stays open. So the router never waits on a phase call blindly:

- :func:`watched` wraps every phase stream. When no response has come for ``liveness_s``, it
  asks the endpoint's :class:`Prober` whether the endpoint is alive. Alive (it answered a
  probe): keep waiting -- a long prefill or a full batch is not a failure. Not alive: the
  stream ends at once with one error response ("... stopped answering: <why>"), so the router
  can fail over or end the client's stream with a request error within seconds.
- :class:`Prober` probes an endpoint (:func:`pdtrt.client.streams.probe`: a stop
  request for an unused id, answered at once by a live engine model; a dead Python-backend stub
  makes Triton answer "Stub process ... is not healthy" after about a second), at most one probe per
  endpoint at a time, and reuses a result younger than ``fresh_s``, so a hundred silent streams
  cost one probe. A failed probe ejects the endpoint from its pools, a good one re-admits it.
- :func:`health_loop` probes every healthy endpoint every ``interval_s`` in the background, so
  a dead one is noticed before a request is sent to it, and an ejected one less and less often
  (:func:`probe_due`), which is how it comes back (e.g. after ``pdtrt serve``'s supervisor
  reloaded the model whose stub died). Probing a dead *local* endpoint is not free: Triton 2.51
  takes about a second to answer a request to a dead stub (a reader thread waits that long),
  so the router also probes an ejected endpoint on demand, when its pool has no healthy one
  left.
- An endpoint that answers a probe (or a call) with
  :data:`~pdtrt.engine_io.DRAINING` is being drained (docs/drain.md): it is taken out of its
  pools as draining, but it *is* alive -- its calls in flight keep their deadline's patience --
  and it is probed every interval, so it comes back as soon as the drain ends.
- A probe that times out while one of the endpoint's calls answered meanwhile
  (:attr:`~pdtrt.runtime.router.pool.Endpoint.answered_s`) does not eject it: the endpoint is
  alive and busy -- the survivor of a pool that just lost a member, taking all its load, on
  cores it shares -- and ejecting it would fail every request it holds and the pool with it.
  An endpoint that sends nothing on any call and does not answer its probe is ejected as before.
- An error that says the callee's stub is dead
  (:data:`~pdtrt.runtime.router.bls_client.STUB_GONE`, Triton's own words) ejects its endpoint at
  once, without a probe.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from pdtrt.client.streams import PROBE_SILENT, StreamClient, StreamResponse, probe
from pdtrt.engine_io import DRAINING
from pdtrt.runtime.router.bls_client import STUB_GONE, ResponseStream
from pdtrt.runtime.router.pool import Endpoint, eject, mark_draining, readmit

__all__ = ["STOPPED_ANSWERING", "Prober", "health_loop", "probe_due", "watched"]

log = logging.getLogger(__name__)

MAX_BACKOFF = 8  # an ejected endpoint is probed at most every 8 intervals
STOPPED_ANSWERING = "stopped answering"  # in the error of a call ended by its liveness deadline


class Prober:
    """Probes endpoints, coalesced per endpoint, and ejects or re-admits them on the result.

    ``on_change(endpoint, healthy)`` is told of every ejection (False) and re-admission (True).
    Runs on one event loop (the router's); not thread-safe.
    """

    def __init__(self, client_of: Callable[[Endpoint], StreamClient], *, timeout_s: float,
                 fresh_s: float, error_output: str = "",
                 on_change: Callable[[Endpoint, bool], None] = lambda _e, _h: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client_of, self.timeout_s, self.fresh_s = client_of, timeout_s, fresh_s
        self.error_output, self.on_change, self.clock = error_output, on_change, clock
        self._running: dict[int, asyncio.Future[str | None]] = {}
        self._last: dict[int, tuple[float, str | None]] = {}  # id(endpoint) -> (when, result)

    async def check(self, endpoint: Endpoint) -> str | None:
        """None when ``endpoint`` answers probes (draining or not), else why not (and it is
        ejected)."""
        key = id(endpoint)
        running = self._running.get(key)
        if running is None:
            last = self._last.get(key)
            if last is not None and self.clock() - last[0] < self.fresh_s:
                return last[1]
            running = asyncio.ensure_future(self._probe(endpoint))
            self._running[key] = running
        # A waiter that gives up must not cancel the probe the others wait on.
        return await asyncio.shield(running)

    def failed(self, endpoint: Endpoint, problem: str) -> None:
        """A call to ``endpoint`` failed with ``problem``: eject it now when that says its
        stub is dead (no probe needed, nor cheap), or as draining when it says so, else leave
        it to :meth:`check`."""
        if DRAINING in problem:
            self._draining(endpoint, problem, self.clock())
        elif STUB_GONE in problem and eject(endpoint, problem, self.clock()):
            log.warning("endpoint %s ejected: %s", endpoint.label, problem)
            self.on_change(endpoint, False)

    async def _probe(self, endpoint: Endpoint) -> str | None:
        started = self.clock()
        try:
            problem = await probe(self.client_of(endpoint), endpoint.spec.model,
                                  timeout_s=self.timeout_s, error_output=self.error_output)
        finally:
            self._running.pop(id(endpoint), None)
        now = self.clock()
        if problem is not None and problem.startswith(PROBE_SILENT) \
                and endpoint.answered_s >= started:
            log.info("endpoint %s: %s, but its calls answer: busy, not dead", endpoint.label,
                     problem)
            self._last[id(endpoint)] = (now, None)  # nor re-admitted: it did not answer
            return None
        if problem is not None and DRAINING in problem:
            self._last[id(endpoint)] = (now, None)  # alive: what it has in flight goes on
            self._draining(endpoint, problem, now)
            return None
        self._last[id(endpoint)] = (now, problem)
        if problem is None:
            if readmit(endpoint, now):
                log.warning("endpoint %s answers again: re-admitted", endpoint.label)
                self.on_change(endpoint, True)
        elif eject(endpoint, problem, now):
            log.warning("endpoint %s ejected: %s", endpoint.label, problem)
            self.on_change(endpoint, False)
        return problem

    def _draining(self, endpoint: Endpoint, problem: str, now: float) -> None:
        if mark_draining(endpoint, problem, now):
            log.warning("endpoint %s is draining: no new requests go to it", endpoint.label)
            self.on_change(endpoint, False)


async def watched(stream: AsyncIterator[StreamResponse], *, liveness_s: float,
                  alive: Callable[[], Awaitable[str | None]], what: str,
                  first_within_s: float = 0.0) -> AsyncIterator[StreamResponse]:
    """The responses of ``stream``; after ``liveness_s`` without one, ``alive()`` decides: None
    (alive) keeps waiting, anything else ends the stream with one error response naming
    ``what`` and the reason. ``liveness_s`` <= 0 watches nothing. With ``first_within_s`` > 0
    the first response must come that soon, alive or not, else the same kind of error ends it
    (an endpoint can answer probes and still never answer one call). ``stream`` is closed when
    this one ends or is closed.

    The deadline is a timed read of a
    :class:`~pdtrt.runtime.router.bls_client.ResponseStream` (any other stream is read into
    one by a task of its own), which survives a timed-out wait and keeps one timer for the whole
    stream (:meth:`~pdtrt.runtime.router.bls_client.ResponseStream.read`), so there is no task
    and no timer per response.
    """
    responses = stream if isinstance(stream, ResponseStream) else ResponseStream.pumped(stream)
    timeout_s = liveness_s if liveness_s > 0 else None
    clock = asyncio.get_running_loop().time
    first_by = clock() + first_within_s if first_within_s > 0 else None
    try:
        while True:
            wait_s = timeout_s if first_by is None else \
                max(min(timeout_s or math.inf, first_by - clock()), 0.0)
            try:
                response = await responses.read(wait_s)
            except TimeoutError:
                if first_by is not None and clock() >= first_by:
                    yield StreamResponse(error=f"{what} sent nothing within "
                                        f"{first_within_s:g} s of the call")
                    return
                problem = await alive()
                if problem is not None:
                    yield StreamResponse(error=f"{what} {STOPPED_ANSWERING}: {problem}")
                    return
                continue
            if response is None:
                return
            first_by = None
            yield response
    finally:
        await responses.aclose()


def probe_due(endpoint: Endpoint, now_s: float, interval_s: float) -> bool:
    """Whether the background loop probes ``endpoint`` now: a healthy one every interval, an
    ejected one after 1, 2, 4 ... (at most :data:`MAX_BACKOFF`) intervals since its last
    failed probe."""
    if endpoint.healthy:
        return True
    backoff = min(2 ** max(endpoint.num_failed_probes - 1, 0), MAX_BACKOFF)
    return now_s - endpoint.failed_s >= backoff * interval_s - 1e-9


async def health_loop(prober: Prober, endpoints: Sequence[Endpoint], *,
                      interval_s: float) -> None:
    """Probe the endpoints that are due (:func:`probe_due`) every ``interval_s`` seconds,
    until cancelled."""
    while True:
        now = prober.clock()
        await asyncio.gather(*(prober.check(e) for e in endpoints
                               if probe_due(e, now, interval_s)), return_exceptions=True)
        await asyncio.sleep(interval_s)
