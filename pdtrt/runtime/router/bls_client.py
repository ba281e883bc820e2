"""How the router reaches a phase model of its own server: a BLS stream.

:class:`BlsPhaseClient` sends a decoupled BLS request through the model's Triton seam
(:meth:`~pdtrt.runtime.triton_io.Triton.bls_exec`) and yields the same
:class:`~pdtrt.client.streams.StreamResponse` stream as the gRPC client of pools in other
servers (:class:`~pdtrt.client.streams.GrpcStreamClient`, shared with the front and the
supervisor), so the router's logic does not depend on where a pool runs. Triton 2.51's BLS
response iterator is synchronous and has no timeout: each stream is read by a (pooled) thread
of its own (:meth:`~pdtrt.runtime.triton_io.Triton.bls_next`), one response each time the
caller asks for the next, into a :class:`ResponseStream` the event loop reads, so one router
instance keeps many requests in flight -- and a caller that stops listening (a liveness
deadline, see :mod:`pdtrt.runtime.router.health`) is never stuck with it: when the callee's
stub has died, ``next()`` never returns (measured: not even after the model is reloaded), and
only that one thread waits on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from typing import Any

import numpy as np

from pdtrt.client.streams import StreamResponse
from pdtrt.errors import PhaseError
from pdtrt.runtime.triton_io import Triton

__all__ = ["STUB_GONE", "BlsPhaseClient", "ResponseStream"]

log = logging.getLogger(__name__)

# Triton 2.51's answer to a request for a model whose Python-backend stub has died:
# "Stub process '<instance>' is not healthy." (pinned by tests/serve/test_self_healing.py).
STUB_GONE = "is not healthy"


def _read_to_end(triton: Triton, responses: Any) -> None:
    """Read what is left of a BLS stream its caller stopped reading (it went away, or an error
    ended it), discarding it. The stub clears a stream once its caller has read the last
    response; a stream left half-read is cleared only when the stub finalizes, and there
    Triton 2.51's stub deadlocks (in ``ResponseIterator::Clear`` at teardown): the router
    never unloads and holds the server's exit for the whole exit timeout."""
    while True:
        try:
            if triton.bls_next(responses, ()) is None:
                return
        except PhaseError:  # a (non-final) error response: the end is still to come
            continue
        except Exception:  # a broken stub: nothing more to read
            return


class ResponseStream:
    """The responses of one phase call, in order, as the router reads them (``async for``).

    A producer -- a BLS reader thread, or a task (:meth:`pumped`) -- puts (:meth:`put`) each
    response as it comes, then None (the end), or an exception for the reader to raise. Unlike
    an async generator's, a wait for the next response can time out (:meth:`read`, the liveness
    deadline of :func:`pdtrt.runtime.router.health.watched`) or be cancelled without losing a
    response or ending the stream, and a response that is already waiting costs no task, no
    timer and no wake-up of the event loop (the producer wakes the loop only when the reader
    waits). With ``on_demand``, :attr:`asked` tells a producer that reads on demand when the
    reader wants the next response (None otherwise: a release per read costs a Python-level
    ``Condition`` on every relayed token); :attr:`closed` tells it that the reader has gone.
    """

    def __init__(self, on_close: Callable[[], Awaitable[None]] | None = None, *,
                 on_demand: bool = False) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._items: deque[StreamResponse | BaseException | None] = deque()
        self._lock = threading.Lock()
        self._waiter: asyncio.Future[None] | None = None
        self._on_close = on_close
        self.closed = False
        # one release per response the reader asks for (and one at close): a producer that
        # must not read ahead waits on it (BlsPhaseClient says why)
        self.asked: threading.Semaphore | None = None
        if on_demand:
            self.asked = threading.Semaphore(0)
        self._asking = False
        # the deadline of timed reads (read(timeout_s=...)): one timer per stream, re-armed
        # only when it fires, not one per read
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # when the timer fires (loop time)
        self._wait_due = 0.0  # when the current timed wait times out (loop time)

    def put(self, item: StreamResponse | BaseException | None) -> None:
        """Queue ``item`` (from any thread)."""
        with self._lock:
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is None:
            return
        if threading.get_ident() == self._loop_thread:
            _wake(waiter)
        else:
            try:
                self._loop.call_soon_threadsafe(_wake, waiter)
            except RuntimeError:  # the event loop has closed
                self.closed = True

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> StreamResponse:
        item = await self.read()
        if item is None:
            raise StopAsyncIteration
        return item

    async def read(self, timeout_s: float | None = None) -> StreamResponse | None:
        """The next response, None at the end. Raises :class:`TimeoutError` when none has
        come within ``timeout_s``: like a cancelled wait, that takes nothing, and the next read
        goes on where it left off.

        Why not ``asyncio.timeout``: that arms and cancels a timer for every wait, i.e. for
        every token relayed; here the stream's one timer is re-armed only when it fires while
        the wait it was armed for is over (:meth:`_expire`).
        """
        if not self._asking and self.asked is not None:  # one ask per response: a retried
            self._asking = True                             # (timed-out) wait asks no more
            self.asked.release()
        while True:
            with self._lock:
                if self._items:
                    item = self._items[0]
                    if item is not None:  # the end stays, for any later read
                        self._items.popleft()
                    break
                waiter = self._waiter = self._loop.create_future()
            if timeout_s is None:
                self._wait_due = math.inf
            else:
                self._wait_due = self._loop.time() + timeout_s
                if self._timer is None or self._wait_due < self._timer_at:
                    self._arm(self._wait_due)  # (a shorter timeout than the last: sooner)
            await waiter  # cancellable: nothing is taken until it is done
        self._asking = False
        if isinstance(item, BaseException):
            raise item
        return item

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(at, self._expire)

    def _expire(self) -> None:
        """The timer fired: the waiting read times out if it has waited its ``timeout_s``
        (a later wait than the one the timer was armed for gets a timer for its own due
        time). The waiter is taken under the lock, so a response :meth:`put` meanwhile stays
        queued for the next read."""
        self._timer = None
        with self._lock:
            waiter = self._waiter
            if waiter is None or waiter.done() or self._wait_due == math.inf:
                return  # no timed wait: the next one arms the timer
            if self._wait_due > self._timer_at:
                self._arm(self._wait_due)
                return
            self._waiter = None
        waiter.set_exception(TimeoutError())

    async def aclose(self) -> None:
        """The reader has gone: the producer discards the rest (a task producer is
        cancelled, and awaited)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.asked is not None:
            self.asked.release()  # a producer waiting for the next ask ends
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            await on_close()

    @classmethod
    def pumped(cls, source: AsyncIterator[StreamResponse]) -> ResponseStream:
        """``source`` (any async iterator, e.g. a gRPC stream) read by a task of its own into
        a new stream; closing the stream cancels the task, which closes ``source``."""
        async def pump() -> None:
            try:
                async with aclosing(source) as responses:  # type: ignore[type-var]
                    async for r in responses:
                        stream.put(r)
            except Exception as exc:  # the reader raises it, in order
                stream.put(exc)
            stream.put(None)

        async def stop() -> None:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

        stream = cls(on_close=stop)
        task = asyncio.ensure_future(pump())
        return stream


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class _Workers:
    """Threads for blocking work, reused: a job goes to an idle thread, or to a new one when
    none is idle -- never queued behind a job that blocks (a BLS ``next()`` on a dead stub
    blocks for good). Starting a thread per phase call costs 13 % of the router's on-CPU
    Python samples at 32 streams (``threading.Thread.start`` waits for the new thread to run;
    benchmarks/router_bench.md). At most ``max_idle`` idle threads are kept."""

    def __init__(self, name: str, max_idle: int = 64) -> None:
        self._name, self._max_idle = name, max_idle
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()

    def run(self, job: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is not None:
            inbox.put(job)
            return
        inbox = queue.SimpleQueue()
        inbox.put(job)
        threading.Thread(target=self._work, args=(inbox,), name=self._name, daemon=True).start()

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            job = inbox.get()
            try:
                job()
            except Exception:  # a job reports its own failures: this is a bug; go on
                log.exception("a %s job failed", self._name)
            del job
            with self._lock:
                if len(self._idle) >= self._max_idle:
                    return
                self._idle.append(inbox)


class BlsPhaseClient:
    """BLS streams; remembers the models whose stub Triton reported dead (:data:`STUB_GONE`)
    until one of them answers again, and fails requests for those at once.

    Each stream is read by a thread of its own (the BLS iterator blocks) into a
    :class:`ResponseStream`, one response each time the caller asks for the next. Not ahead,
    and not relaying the tokens itself: with a reader thread that calls ``next()`` again as
    soon as it has handed a response over (read-ahead), or that sends the token to the client
    itself, the router's stub segfaults inside libpython's allocator within seconds at 32
    concurrent streams (Triton 2.51, python_backend r24.10; docs/design/serve.md, "Triton 2.51
    facts"; benchmarks/variants/ keeps the relaying one); reading on demand does not. Once the
    caller has gone, the rest of the stream is read and discarded (:func:`_read_to_end` says
    why).
    """

    where = "this server"

    def __init__(self, triton: Triton) -> None:
        self.triton = triton
        self._down: dict[str, str] = {}  # model -> Triton's message (threads: atomic ops only)
        self._readers = _Workers("pdtrt-bls-reader")

    def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
               parameters: Mapping[str, str], outputs: list[str], error_output: str = "",
               fail_fast: bool = True) -> ResponseStream:
        names = outputs + ([error_output] if error_output else [])
        skip_if = (lambda: self._down.get(model)) if fail_fast else None
        stream = ResponseStream(on_demand=True)
        asked = stream.asked
        assert asked is not None

        def read() -> None:
            responses = None
            try:
                responses = self.triton.bls_exec(model, inputs, request_id=request_id,
                                                 parameters=parameters, outputs=names,
                                                 skip_if=skip_if)
                while True:
                    asked.acquire()  # the caller asks for the next response, or goes
                    if stream.closed:
                        break
                    got = self.triton.bls_next(responses, names)
                    if got is None:
                        responses = None  # read to its end
                        break
                    self._down.pop(model, None)  # it answers
                    stream.put(StreamResponse.of(got, error_output))
                self._down.pop(model, None)
            except PhaseError as exc:  # an error response ends the stream
                if STUB_GONE in exc.message:
                    self._down[model] = exc.message
                stream.put(StreamResponse(error=exc.message))
            except Exception as exc:  # a bug or a broken stub: the caller raises it
                stream.put(exc)
            stream.put(None)
            if responses is not None:
                _read_to_end(self.triton, responses)

        self._readers.run(read)
        return stream


