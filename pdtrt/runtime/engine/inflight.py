"""Which requests an engine instance holds, by Triton request id, so a ``stop`` can reach them.

TensorRT-LLM's ``tensorrt_llm`` model stops a request when another request with the *same
request id* arrives with the input ``stop`` = true (it answers that one with an empty final
response; an empty id is an error). pdtrt's engine model does the same. A stop for a
context-only request that has already finished frees nothing: TensorRT-LLM 1.2 ignores an abort
of a finished request, so the KV it holds for a decode goes when ``kv_transfer_timeout_ms`` runs
out. :class:`InflightRequests` also counts those hand-offs until then (:meth:`num_held`).

:class:`InflightRequests` is that bookkeeping, free of Triton and UCX so it is unit-tested
directly: live sequences are registered until their final response; each KV hand-off is
remembered with the time its timeout runs out.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass

__all__ = ["InflightRequests", "StopHandle", "StopResult"]


@dataclass
class StopHandle:
    """One live sequence; the scheduler polls ``stopped`` through ``is_cancelled``."""

    request_id: str
    stopped: bool = False


@dataclass(frozen=True)
class StopResult:
    sequences: int  # live sequences marked stopped
    held: int  # KV hand-offs of that request id still held (a stop cannot free them)


class InflightRequests:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, list[StopHandle]] = {}
        self._held: list[tuple[float, str]] = []  # heap of (until_s, request id)

    def register(self, request_id: str) -> StopHandle:
        handle = StopHandle(request_id)
        with self._lock:
            self._live.setdefault(request_id, []).append(handle)
        return handle

    def finished(self, handle: StopHandle) -> None:
        with self._lock:
            handles = self._live.get(handle.request_id, [])
            if handle in handles:
                handles.remove(handle)
            if not handles:
                self._live.pop(handle.request_id, None)

    def offered(self, request_id: str, until_s: float) -> None:
        """A finished context-only request of ``request_id`` holds KV until ``until_s``
        (``math.inf``: until pulled -- no timeout configured)."""
        with self._lock:
            heapq.heappush(self._held, (until_s, request_id))

    def num_held(self, now_s: float) -> int:
        """KV hand-offs whose timeout has not run out at ``now_s`` (an upper bound of what the
        engine holds: a pulled one is freed at once, and the prefill side is not told)."""
        with self._lock:
            while self._held and self._held[0][0] <= now_s:
                heapq.heappop(self._held)
            return len(self._held)

    def stop(self, request_id: str, now_s: float) -> StopResult:
        with self._lock:
            handles = self._live.get(request_id, [])
            for handle in handles:
                handle.stopped = True
            held = sum(1 for until, rid in self._held if rid == request_id and until > now_s)
            return StopResult(len(handles), held)

    @property
    def num_live(self) -> int:
        with self._lock:
            return sum(len(h) for h in self._live.values())
