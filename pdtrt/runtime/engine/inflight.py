"""Which requests an engine instance holds, by Triton request id, so a ``stop`` can reach them.

TensorRT-LLM's ``tensorrt_llm`` model stops a request when another request with the *same
request id* arrives with the input ``stop`` = true (it answers that one with an empty final
response; an empty id is an error). pdtrt's engine model does the same and goes one step
further for the prefill role: a stop for a context-only request that has already finished
frees the KV it still holds for the decode side, instead of waiting for the timeout.

:class:`InflightRequests` is that bookkeeping, free of Triton and UCX so it is unit-tested
directly: live sequences are registered until their final response; offered KV (whatever
identifies it to the engine -- the LLM engine model keeps the finished context-only result, to
abort it) is remembered by request id until a stop claims it or it is no longer held.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InflightRequests", "StopHandle", "StopResult"]


@dataclass
class StopHandle:
    """One live sequence; the scheduler polls ``stopped`` through ``is_cancelled``."""

    request_id: str
    stopped: bool = False


@dataclass(frozen=True)
class StopResult:
    sequences: int  # live sequences marked stopped
    transfers: tuple[Any, ...] = field(default=())  # held KV offers to release


class InflightRequests:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, list[StopHandle]] = {}
        self._offers: dict[str, list[Any]] = {}

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

    def offered(self, request_id: str, transfer_id: Any,
                still_held: Callable[[Any], bool]) -> None:
        """Remember an offered transfer; forget those no longer held (pulled or expired)."""
        with self._lock:
            for rid in list(self._offers):
                kept = [t for t in self._offers[rid] if still_held(t)]
                if kept:
                    self._offers[rid] = kept
                else:
                    del self._offers[rid]
            self._offers.setdefault(request_id, []).append(transfer_id)

    def stop(self, request_id: str) -> StopResult:
        with self._lock:
            handles = self._live.get(request_id, [])
            for handle in handles:
                handle.stopped = True
            return StopResult(len(handles), tuple(self._offers.pop(request_id, ())))

    @property
    def num_live(self) -> int:
        with self._lock:
            return sum(len(h) for h in self._live.values())
