"""The reference KV cache transceiver: a prompt's KV from a context-only request to a
generation-only one, over UCX (ucxx, :class:`pdtrt.llmapi.reference.kv_transfer.UcxKVNode`).

Upstream, ``cache_transceiver_config`` (backend UCX) makes the executor hold a finished context-
only request's KV and return, in ``DisaggregatedParams.opaque_state``, the serialized communication
and cache state the generation side needs to pull it; the generation-only request pulls it before
it runs. ``kv_transfer_timeout_ms`` is how long upstream holds a KV nobody pulls; unset (1.2's
default), it is held until pulled -- an abort of the finished context request does not free it
(``_handle_canceled_requests`` skips finished requests). The reference does the same, and has no
early release either: :meth:`KVCacheTransceiver.offer` holds the packed KV and returns the opaque
state -- this worker's UCX address, the transfer id, the byte count, the prompt length and the KV
layout -- and :meth:`KVCacheTransceiver.pull` checks the layout and fetches it. TensorRT-LLM's
opaque state is not this; only the same pdtrt reference reads it back.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from pdtrt.engine_dir import KVLayout
from pdtrt.errors import KVTransferError
from pdtrt.llmapi.reference.engine import KV, pack_kv, unpack_kv
from pdtrt.llmapi.reference.kv_transfer import UcxKVNode

__all__ = ["HeldKV", "KVCacheTransceiver", "KVFaultHook"]

log = logging.getLogger(__name__)

_VERSION = 1


class KVFaultHook(Protocol):
    """Fault injection (the engine model's, :mod:`pdtrt.runtime.faults`): asked when a request's
    KV is offered what to do when a decode pulls it -- ``"kill"`` (SIGKILL this process then),
    ``"drop_done"`` (answer, but never complete the transfer) or None."""

    def kv_transfer_fault(self, request_id: str) -> str | None: ...
    def kill_process(self) -> None:
        """The ``"kill"`` fault: end this process now (SIGKILL)."""


@dataclass(frozen=True, kw_only=True)
class HeldKV:
    """What ``opaque_state`` says about one held KV cache."""

    address: bytes  # the context worker's UCX worker address
    transfer_id: int
    kv_nbytes: int
    prompt_len: int
    layout: KVLayout

    def encode(self) -> bytes:
        return json.dumps({"v": _VERSION, "address": base64.b64encode(self.address).decode(),
                           "transfer_id": self.transfer_id, "kv_nbytes": self.kv_nbytes,
                           "prompt_len": self.prompt_len,
                           "layout": self.layout.to_dict()},
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, opaque_state: bytes) -> HeldKV:
        try:
            doc = json.loads(opaque_state.decode())
            if doc.get("v") != _VERSION:
                raise ValueError(f"opaque_state version {doc.get('v')!r}, expected {_VERSION}")
            return cls(address=base64.b64decode(doc["address"]),
                       transfer_id=int(doc["transfer_id"]), kv_nbytes=int(doc["kv_nbytes"]),
                       prompt_len=int(doc["prompt_len"]),
                       layout=KVLayout(**doc["layout"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KVTransferError(f"unreadable opaque_state: {exc}") from None


class KVCacheTransceiver:
    """One worker's side of the KV hand-off; :meth:`start` before use, :meth:`stop` after."""

    def __init__(self, layout: KVLayout, *, hold_s: float, pull_timeout_s: float,
                 transports: tuple[str, ...]) -> None:
        self.layout = layout
        self.node = UcxKVNode(transports=transports, hold_s=hold_s,
                              pull_timeout_s=pull_timeout_s)
        self.pulled = 0
        self.pulled_bytes = 0
        self.pull_s = 0.0
        self._offered: dict[int, int] = {}  # transfer id -> prompt length, while held
        self.faults: KVFaultHook | None = None
        self._faulty: dict[int, str] = {}  # transfer id -> the fault its pull meets
        self.node.before_serve = self._before_serve

    def start(self) -> None:
        self.node.start()

    def stop(self) -> None:
        self.node.stop()

    def offer(self, kv: KV, prompt_len: int, request_id: str = "") -> bytes:
        """Hold ``kv`` (of ``request_id``) for a generation worker; the ``opaque_state`` that
        lets it pull."""
        buffer = pack_kv(kv)
        fault = self.faults.kv_transfer_fault(request_id) if self.faults is not None else None
        transfer_id = self.node.offer(buffer)
        self._offered[transfer_id] = prompt_len
        if fault is not None:
            self._faulty[transfer_id] = fault
        return HeldKV(address=self.node.address, transfer_id=transfer_id,
                      kv_nbytes=int(buffer.nbytes), prompt_len=prompt_len,
                      layout=self.layout).encode()

    def pull(self, opaque_state: bytes, prompt_len: int) -> KV:
        """Fetch the KV ``opaque_state`` names (blocking). Raises :class:`KVTransferError`."""
        held = HeldKV.decode(opaque_state)
        if held.layout != self.layout:
            raise KVTransferError(f"KV layout of the context worker ({held.layout}) differs "
                                  f"from this worker's ({self.layout})")
        if held.prompt_len != prompt_len:
            raise KVTransferError(f"the held KV covers {held.prompt_len} tokens but the prompt "
                                  f"has {prompt_len}")
        start = time.perf_counter()
        buffer = self.node.pull(held.address, held.transfer_id, held.kv_nbytes)
        self.pull_s += time.perf_counter() - start
        self.pulled += 1
        self.pulled_bytes += held.kv_nbytes
        return unpack_kv(buffer, self.layout, held.prompt_len)

    def _before_serve(self, transfer_id: int) -> bool:
        """Whether the pull of ``transfer_id`` completes (the node asks; fault injection)."""
        fault = self._faulty.pop(transfer_id, None)
        if fault == "kill":
            log.warning("fault injection: KV transfer %x pulled; SIGKILL of this process",
                        transfer_id)
            if self.faults is not None:  # the hook that armed it
                self.faults.kill_process()  # returns only where a test fakes the kill
        if fault == "drop_done":
            log.warning("fault injection: KV transfer %x pulled; its completion is dropped",
                        transfer_id)
        return fault != "drop_done"

    def held_prompt_lens(self) -> list[int]:
        """The prompt length of every KV still held (neither pulled nor expired)."""
        for tid in [t for t in self._offered if not self.node.is_held(t)]:
            self._offered.pop(tid, None)
        return list(self._offered.values())

    def stats(self) -> dict[str, float]:
        s = self.node.stats
        return {"held": len(s.held), "offered": s.offered, "served": s.served,
                "expired": s.expired, "pulled": self.pulled,
                "pulled_bytes": self.pulled_bytes, "pull_s": self.pull_s}
