"""``LLMClient``: generation requests over a pool of Triton streams, timed per chunk.

Each in-flight request has its own stream (a :class:`~pdtrt.client.transport.Transport`);
streams are reused for the next request once a request ends, so a closed loop of C users
opens C streams, and an open loop as many as are in flight at its peak. Responses are timed
on the transport's reader thread with the injected monotonic clock. Timeouts and cancellation
end a request at once (its result says so) and retire its stream, so a late response can
never be taken for another request's. Retired streams are closed off their reader threads
(closing joins the reader thread, which must not close itself).

By default a retired stream is closed *gracefully*: the server finishes the abandoned request
and its responses are dropped. ``cancel_streams=True`` cancels the gRPC stream instead, which
frees the server at once -- but Triton up to 2.52 (24.11) can crash with SIGSEGV on a gRPC
cancellation racing a response (triton-inference-server/server #7368, fixed by PR #7840 in
24.12), pdtrt's embedded Triton 2.51 included. A graceful close never
waits on a request the server has lost (e.g. its model's process died): when the abandoned
request has not ended within ``drain_s``, its stream is cancelled instead (no response can
race a cancel then), and no thread of a stream keeps the process alive at exit.

``submit`` is non-blocking and returns a :class:`Pending`; ``generate`` waits for it.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable

from pdtrt.client.inputs import build_inputs
from pdtrt.client.timing import ServerTiming
from pdtrt.client.transport import GrpcTransport, StreamEvent, Transport, TransportFactory
from pdtrt.client.types import Chunk, ErrorKind, GenerateRequest, GenerateResult, ModelSignature
from pdtrt.errors import RequestError

__all__ = ["LLMClient", "Pending"]

log = logging.getLogger(__name__)
_TICK_S = 0.01
DRAIN_S = 30.0  # how long a retired stream's abandoned request may take to end on the server


class Pending:
    """A request in flight: ``wait()`` for its :class:`GenerateResult`, or ``cancel()`` it."""

    def __init__(self, client: LLMClient, request_id: str, model: str,
                 deadline_s: float | None, on_chunk: Callable[[Chunk], None] | None,
                 on_done: Callable[[GenerateResult], None] | None) -> None:
        self.request_id = request_id
        self.model = model
        self.send_time_s = 0.0
        self._client = client
        self._deadline_s = deadline_s
        self._on_chunk = on_chunk
        self._on_done = on_done
        self._chunks: list[Chunk] = []
        self._timing: ServerTiming | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._result: GenerateResult | None = None
        self._slot: _Slot | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout_s: float | None = None) -> GenerateResult:
        if not self._done.wait(timeout_s):
            raise TimeoutError(f"request {self.request_id} still running after {timeout_s} s")
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        self._finish(self._client.clock(), ErrorKind.CANCELLED, "cancelled by the caller")

    # -- called by the client ----------------------------------------------------------------
    def _on_event(self, event: StreamEvent) -> None:
        now = self._client.clock()
        if event.error is not None:
            kind = ErrorKind.UNAVAILABLE if event.unavailable else ErrorKind.REQUEST
            self._finish(now, kind, event.error)
            return
        if event.timing:
            self._timing = _parsed_timing(event.timing, self.request_id)
        if event.text or event.num_tokens:  # a response with tokens, if no text (yet)
            chunk = Chunk(text=event.text or "", time_s=now,
                          num_tokens=1 if event.num_tokens is None else event.num_tokens)
            with self._lock:
                if self._result is not None:
                    return
                self._chunks.append(chunk)
            if self._on_chunk is not None:
                self._on_chunk(chunk)
        if event.final:
            self._finish(now, None, None)

    def _finish(self, now_s: float, kind: ErrorKind | None, error: str | None) -> None:
        with self._lock:
            if self._result is not None:
                return
            self._result = GenerateResult(
                request_id=self.request_id, model=self.model, send_time_s=self.send_time_s,
                end_time_s=now_s, chunks=tuple(self._chunks), error=error, error_kind=kind,
                timing=self._timing)
        self._client._release(self, clean=kind is None)
        self._done.set()
        if self._on_done is not None:
            self._on_done(self._result)


def _parsed_timing(text: str, request_id: str) -> ServerTiming | None:
    """The server's timing; a malformed one is logged and dropped (the request itself went
    fine, and the timing is an extra)."""
    try:
        return ServerTiming.parse(text)
    except RequestError as exc:
        log.warning("request %s: %s", request_id, exc)
        return None


class _Slot:
    """One transport and the request it is carrying (at most one)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.pending: Pending | None = None
        self.cancel_on_close = False  # cancel the gRPC stream when closing it
        self.abandoned = False  # a request on it ended early; closing may wait for the server
        self.settled = threading.Event()  # the server ended the stream's last request

    def on_event(self, event: StreamEvent) -> None:
        if event.final:
            self.settled.set()
        pending = self.pending
        if pending is None:
            log.debug("response on an idle stream ignored: %s", event)
            return
        pending._on_event(event)


_NO_SLOT = _Slot.__new__(_Slot)  # "nothing retired this tick"


class LLMClient:
    """Talks to the TensorRT-LLM ensemble I/O of models on one Triton server.

    ``transport_factory`` makes one stream's transport (default: gRPC to ``url``); ``clock``
    is the monotonic clock (seconds) every timestamp comes from.
    """

    def __init__(self, url: str = "127.0.0.1:8001", *,
                 transport_factory: TransportFactory | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 cancel_streams: bool = False, drain_s: float = DRAIN_S) -> None:
        self.url = url
        self.clock = clock
        self.cancel_streams = cancel_streams
        self.drain_s = drain_s
        self._factory = transport_factory or (lambda: GrpcTransport(url))
        self._lock = threading.Lock()
        self._idle: list[_Slot] = []
        self._busy: dict[str, Pending] = {}
        self._signatures: dict[str, ModelSignature] = {}
        self._retired: queue.SimpleQueue[_Slot | None] = queue.SimpleQueue()
        self._ids = itertools.count()
        self._prefix = uuid.uuid4().hex[:8]
        self._closed = False
        self._housekeeper = threading.Thread(target=self._housekeeping, daemon=True,
                                             name="pdtrt-client-housekeeping")
        self._housekeeper.start()

    # -- public ------------------------------------------------------------------------------
    def check(self, model: str) -> ModelSignature:
        """The model's signature (cached); raises ServerUnavailableError/ModelNotFoundError."""
        with self._lock:
            if model in self._signatures:
                return self._signatures[model]
        transport = self._factory()
        try:
            signature = transport.describe(model)
        finally:
            transport.close(cancel=False)
        with self._lock:
            self._signatures[model] = signature
        return signature

    def submit(self, request: GenerateRequest, *, model: str = "ensemble",
               timeout_s: float | None = None, on_chunk: Callable[[Chunk], None] | None = None,
               on_done: Callable[[GenerateResult], None] | None = None) -> Pending:
        """Send ``request`` now; returns at once. Raises RequestError for a request the
        model cannot take (its inputs), ServerUnavailableError if no stream can be opened."""
        tensors = build_inputs(request, self.check(model))
        request_id = request.request_id or f"{self._prefix}-{next(self._ids)}"
        slot = self._acquire()
        pending = Pending(self, request_id, model, None, on_chunk, on_done)
        pending._slot = slot
        slot.settled.clear()
        slot.pending = pending
        with self._lock:
            self._busy[request_id] = pending
        pending.send_time_s = self.clock()
        if timeout_s is not None:
            pending._deadline_s = pending.send_time_s + timeout_s
        try:
            slot.transport.send(model, tensors, request_id)
        except Exception as exc:  # noqa: BLE001 -- any send failure ends this request
            pending._finish(self.clock(), ErrorKind.UNAVAILABLE, f"send failed: {exc}")
        return pending

    def generate(self, request: GenerateRequest, *, model: str = "ensemble",
                 timeout_s: float | None = None,
                 on_chunk: Callable[[Chunk], None] | None = None) -> GenerateResult:
        """Send ``request`` and wait for its result (errors are in the result:
        ``result.raise_for_error()`` raises them)."""
        return self.submit(request, model=model, timeout_s=timeout_s, on_chunk=on_chunk).wait()

    def open_streams(self, num_streams: int) -> int:
        """Open idle streams until ``num_streams`` exist (busy or idle); returns how many were
        opened. Opening one costs milliseconds (threads, a gRPC channel): a load generator
        opens them before its clock starts."""
        with self._lock:
            missing = num_streams - len(self._idle) - len(self._busy)
        for _ in range(max(0, missing)):
            slot = self._acquire(new=True)
            with self._lock:
                self._idle.append(slot)
        return max(0, missing)

    @property
    def num_open_streams(self) -> int:
        with self._lock:
            return len(self._idle) + len(self._busy)

    def close(self) -> None:
        """Cancel what is in flight and close every stream (also on ``with`` exit)."""
        with self._lock:
            self._closed = True
            busy = list(self._busy.values())
        for pending in busy:
            pending._finish(self.clock(), ErrorKind.CANCELLED, "client closed")
        with self._lock:
            idle, self._idle = self._idle, []
        for slot in idle:
            self._retired.put(slot)
        self._retired.put(None)
        self._housekeeper.join()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------
    def _acquire(self, *, new: bool = False) -> _Slot:
        with self._lock:
            if self._idle and not new:
                return self._idle.pop()
        slot = _Slot(self._factory())
        slot.transport.start_stream(slot.on_event)
        return slot

    def _release(self, pending: Pending, *, clean: bool) -> None:
        slot = pending._slot
        with self._lock:
            self._busy.pop(pending.request_id, None)
            if slot is None:
                return
            slot.pending = None
            if clean and not self._closed:
                self._idle.append(slot)
                return
        slot.cancel_on_close = self.cancel_streams and not clean
        slot.abandoned = not clean
        self._retired.put(slot)

    def _housekeeping(self) -> None:
        """Expire deadlines; close retired streams off their reader threads."""
        while True:
            try:
                slot = self._retired.get(timeout=_TICK_S)
            except queue.Empty:
                slot = _NO_SLOT
            if slot is None:
                break
            if slot is not _NO_SLOT:
                if slot.abandoned and not slot.cancel_on_close:
                    # a graceful close waits for the server to finish the request: not here
                    threading.Thread(target=self._drain_slot, args=(slot,), daemon=True,
                                     name="pdtrt-client-drain").start()
                else:
                    self._close_slot(slot)
            self._expire_deadlines()
        while True:  # slots queued after the stop sentinel
            try:
                slot = self._retired.get_nowait()
            except queue.Empty:
                return
            if slot is not None:
                self._close_slot(slot)

    def _expire_deadlines(self) -> None:
        now = self.clock()
        with self._lock:
            expired = [p for p in self._busy.values()
                       if p._deadline_s is not None and now >= p._deadline_s]
        for pending in expired:
            limit_s = (pending._deadline_s or now) - pending.send_time_s
            pending._finish(now, ErrorKind.TIMEOUT, f"no final response within {limit_s:g} s")

    def _drain_slot(self, slot: _Slot) -> None:
        """Close a stream whose request was abandoned: gracefully once the server has ended
        that request, else (``drain_s`` later) by cancelling it -- a graceful close joins the
        stream's reader, which waits for good on a request the server lost."""
        if not slot.settled.wait(self.drain_s):
            log.debug("an abandoned request did not end within %g s; cancelling its stream",
                      self.drain_s)
            slot.cancel_on_close = True
        self._close_slot(slot)

    @staticmethod
    def _close_slot(slot: _Slot) -> None:
        try:
            slot.transport.close(cancel=slot.cancel_on_close)
        except Exception:  # noqa: BLE001 -- a stream that fails to close is already gone
            log.debug("closing a stream failed", exc_info=True)
