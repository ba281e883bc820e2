"""Moving a request's KV cache from a prefill instance to a decode instance over UCX (ucxx).

Each engine instance (a Triton Python-backend stub process) owns one :class:`UcxKVNode`: a
ucxx worker driven by an asyncio loop in a daemon thread. The prefill side *offers* a packed KV
buffer under a transfer id and publishes its worker address in ``context_phase_params``; the
decode side *pulls*: it connects to that address (the worker-address API reaches shared memory
on one host, TCP across hosts, as ``UCX_TLS`` allows), posts receives on two fresh tags, and
sends a pull request carrying its own address and the tags. The prefill side answers with a
status word then the buffer, and frees the buffer once the send has completed -- a rendezvous
send completes only after the receiver has the data, so completion is the acknowledgement.
Buffers nobody pulls are freed ``hold_s`` after the offer -- and only then: like TensorRT-LLM's
cache transceiver there is no early release (an abort of the finished context request does not
free it; :mod:`pdtrt.llmapi.reference.llm`). A pull waits at most ``pull_timeout_s``.

Wire format of a pull request (tag ``PULL_TAG``): ``transfer_id u64 | reply_tag u64 |
address_len u32 | address``. Reply: status ``u64`` on ``reply_tag`` (0 ok, 1 unknown or
expired), then on ``reply_tag + 1`` the ``kv_nbytes`` bytes.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pdtrt.errors import KVTransferError

__all__ = ["TransferStats", "UcxKVNode"]

log = logging.getLogger(__name__)

PULL_TAG = 0x7064_7472_7400_0001  # "pdtrt" + 1
_REQUEST_MAX_BYTES = 64 * 1024
_STATUS_OK, _STATUS_MISSING = 0, 1
_HEADER = struct.Struct("<QQI")


@dataclass
class TransferStats:
    """Counters of the prefill side of one node (exported as gauges by the engine model; the
    decode side's pull count, bytes and time are the engine model's ``pdtrt_kv_transfer*``)."""

    offered: int = 0
    served: int = 0
    expired: int = 0
    held: dict[int, tuple[np.ndarray, float]] = field(default_factory=dict)


async def _init_ucxx() -> bytes:
    """Create this process's ucxx context on the running (the node's) loop; its address.

    ucxx's default waits for a request by re-scheduling itself on the event loop until the
    request completes, so a node idling on its pending ``PULL_TAG`` receive kept 60-100 % of a
    core busy. With Python futures, ucxx's notifier thread completes an asyncio future
    instead and the loop sleeps. That thread binds to the loop that is *running* when the
    context is created (a fresh, never-run loop otherwise), hence this coroutine.
    """
    import ucxx

    try:
        ucxx.init(enable_python_future=True)
    except RuntimeError as exc:  # one context per process: a second node shares it
        if "already initiated" not in str(exc):
            raise
    return bytes(memoryview(ucxx.get_worker_address()))


class UcxKVNode:
    """One process's UCX endpoint for KV transfer; call :meth:`start` before use."""

    def __init__(self, *, transports: tuple[str, ...] = ("sm", "tcp"),
                 hold_s: float = 30.0, pull_timeout_s: float = 30.0,
                 on_change: Callable[[], None] | None = None) -> None:
        self.transports = transports
        self.hold_s = hold_s  # math.inf: held until pulled (no kv_transfer_timeout_ms)
        self.pull_timeout_s = pull_timeout_s
        # called on the UCX thread after held buffers were served or expired (for gauges)
        self.on_change = on_change
        # fault injection: asked on the UCX thread when a decode pulls a held buffer; False
        # drops the transfer's completion (the buffer is not sent and stays held)
        self.before_serve: Callable[[int], bool] | None = None
        self.stats = TransferStats()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._address: bytes | None = None
        self._endpoints: dict[bytes, object] = {}
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        # UCX reads its configuration when ucxx is first imported in this process.
        os.environ["UCX_TLS"] = ",".join(self.transports)
        os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self._address = loop.run_until_complete(_init_ucxx())
                self._tasks = [loop.create_task(self._serve()), loop.create_task(self._sweep())]
            except BaseException as exc:  # reported to start()
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="pdtrt-ucx", daemon=True)
        self._thread.start()
        ready.wait(60)
        if errors or self._address is None:
            raise KVTransferError(f"cannot start UCX: {errors[0] if errors else 'timeout'}",
                                  hint="check that ucxx-cu12 is installed and UCX_TLS is valid")

    def stop(self) -> None:
        loop = self._loop
        if loop is not None:
            def shutdown() -> None:
                for task in self._tasks:
                    task.cancel()
                loop.call_soon(loop.stop)

            loop.call_soon_threadsafe(shutdown)
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._address is not None:
            import ucxx

            # ucxx's notifier thread is not a daemon; ucxx asks for it to be stopped explicitly
            ucxx.stop_notifier_thread()

    @property
    def address(self) -> bytes:
        if self._address is None:
            raise KVTransferError("UCX node not started")
        return self._address

    # -- prefill side ------------------------------------------------------------------------
    def offer(self, buffer: np.ndarray) -> int:
        """Hold ``buffer`` (uint8) for a decode instance to pull; returns its transfer id."""
        transfer_id = secrets.randbits(62)
        with self._lock:
            self.stats.held[transfer_id] = (buffer, time.monotonic() + self.hold_s)
            self.stats.offered += 1
        return transfer_id

    def is_held(self, transfer_id: int) -> bool:
        with self._lock:
            return transfer_id in self.stats.held

    async def _serve(self) -> None:
        import ucxx

        while True:
            message = np.empty(_REQUEST_MAX_BYTES, dtype=np.uint8)
            await ucxx.recv(message, tag=PULL_TAG)
            asyncio.get_running_loop().create_task(self._answer(message))

    async def _answer(self, message: np.ndarray) -> None:
        transfer_id, reply_tag, addr_len = _HEADER.unpack_from(message)
        peer = message[_HEADER.size:_HEADER.size + addr_len].tobytes()
        with self._lock:
            held = self.stats.held.get(transfer_id)
        ep = await self._endpoint(peer)
        status = np.array([_STATUS_OK if held else _STATUS_MISSING], dtype=np.uint64)
        complete = held is None or self.before_serve is None or self.before_serve(transfer_id)
        await ep.send(status, tag=reply_tag, force_tag=True)
        if held is None or not complete:  # not complete: the decode waits out its pull, the
            return  # buffer stays held until hold_s (fault injection: a lost "done")
        await ep.send(held[0], tag=reply_tag + 1, force_tag=True)
        with self._lock:
            if self.stats.held.pop(transfer_id, None) is not None:
                self.stats.served += 1
        self._changed()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            with self._lock:
                expired = [t for t, (_, deadline) in self.stats.held.items() if deadline < now]
                for tid in expired:
                    del self.stats.held[tid]
                    self.stats.expired += 1
            if expired:
                self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # a metrics hook must not stop the UCX loop
                log.exception("KV transfer on_change hook failed")

    # -- decode side -------------------------------------------------------------------------
    def pull(self, address: bytes, transfer_id: int, nbytes: int) -> np.ndarray:
        """Fetch the buffer held under ``transfer_id`` at ``address`` (blocking)."""
        if self._loop is None:
            raise KVTransferError("UCX node not started")
        future = asyncio.run_coroutine_threadsafe(self._pull(address, transfer_id, nbytes),
                                                  self._loop)
        try:
            buffer = future.result(  # math.inf: no kv_transfer_timeout_ms, wait as upstream
                timeout=None if math.isinf(self.pull_timeout_s) else self.pull_timeout_s)
        except TimeoutError:
            future.cancel()
            raise KVTransferError(f"KV transfer {transfer_id:x} timed out after "
                                  f"{self.pull_timeout_s:g} s") from None
        return buffer

    async def _pull(self, address: bytes, transfer_id: int, nbytes: int) -> np.ndarray:
        import ucxx

        reply_tag = secrets.randbits(62) << 1
        status = np.empty(1, dtype=np.uint64)
        buffer = np.empty(nbytes, dtype=np.uint8)
        got_status = asyncio.ensure_future(ucxx.recv(status, tag=reply_tag))
        me = self.address
        request = np.frombuffer(_HEADER.pack(transfer_id, reply_tag, len(me)) + me,
                                dtype=np.uint8)
        ep = await self._endpoint(address)
        await ep.send(request, tag=PULL_TAG, force_tag=True)
        await got_status
        if int(status[0]) != _STATUS_OK:
            raise KVTransferError(f"the prefill instance no longer holds KV transfer "
                                  f"{transfer_id:x} (its kv_transfer_timeout ran out, or it "
                                  "was pulled already)")
        await ucxx.recv(buffer, tag=reply_tag + 1)
        return buffer

    async def _endpoint(self, address: bytes):
        import ucxx

        ep = self._endpoints.get(address)
        if ep is None:
            ep = await ucxx.create_endpoint_from_worker_address(
                ucxx.get_ucx_address_from_buffer(address), endpoint_error_handling=False)
            self._endpoints[address] = ep
        return ep
