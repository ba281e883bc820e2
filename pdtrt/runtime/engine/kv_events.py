"""The engine instance's KV blocks, as the router's KV index reads them (issue 27).

With ``kv_cache_config.enable_block_reuse`` and ``event_buffer_max_size > 0`` TensorRT-LLM 1.2
records KV cache events -- blocks stored for reuse, blocks removed (evicted), the cache created
-- which ``LLM.get_kv_cache_events`` drains: whoever drains an event owns it, and a buffer that
is not drained drops its oldest events. So the engine model drains them itself, often (every
poll of its loop, and before it answers), into a :class:`KvEventLog`: the set of block hashes
the instance holds now, and its recent changes, numbered within an **epoch** (a random id of
this log's life: a reloaded model, a restarted server is a new epoch).

A router asks with a **cursor**, ``EPOCH:SEQ`` (the last change it applied; "" at first; one per
instance it knows, comma-separated, since it cannot choose which instance answers) and gets the
changes after its own epoch's -- or, for a cursor of another epoch, one the log no longer
reaches back to, or none, a **snapshot** of every block. Either way the answer carries the log's
own cursor. An index kept that way is one poll behind the engine at most and never outlives the
engine's cache (:mod:`pdtrt.runtime.router.kv_index`). The answer (JSON, the ``kv_events``
output)::

    {"epoch": "9f2c...", "seq": 42, "changes": [["+", [h, ...]], ["-", [h, ...]]]}
    {"epoch": "9f2c...", "seq": 42, "snapshot": [h, ...]}

Only block hashes cross (TensorRT-LLM's, :mod:`pdtrt.kv_blocks`): a prompt's chained block
hashes name its prefix, so the set is enough to count how many leading blocks of a prompt the
instance holds. Event kinds other than stored, removed and created (``updated``: priority and
cache-level changes) change no hash and are skipped. Event shape: ``KVCacheEventSerializer``
in ``tensorrt_llm/_utils.py`` (NVIDIA/TensorRT-LLM ed53795b).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["KvEventLog", "events_enabled"]

_MAX_CHANGES = 4096  # changes kept for cursors; an older cursor gets a snapshot


def events_enabled(options: dict[str, Any]) -> bool:
    """Whether LLM-API ``options`` make the engine record KV cache events."""
    kv = options.get("kv_cache_config") or {}
    return bool(kv.get("enable_block_reuse")) and int(kv.get("event_buffer_max_size") or 0) > 0


class KvEventLog:
    """The blocks one engine instance holds, fed by its KV cache events (``drain``) and read
    by routers (``answer``); thread-safe."""

    def __init__(self, source: Callable[[], Iterable[dict[str, Any]]], *,
                 max_changes: int = _MAX_CHANGES) -> None:
        self.epoch = secrets.token_hex(6)
        self._source = source  # drains the engine's events: llm.get_kv_cache_events(0)
        self._blocks: set[int] = set()
        self._seq = 0  # changes applied in this epoch
        self._changes: deque[tuple[int, str, list[int]]] = deque(maxlen=max_changes)
        self._floor = 0  # a cursor below this cannot be served changes (a reset, or the ring)
        self._lock = threading.Lock()

    @property
    def num_blocks(self) -> int:
        return len(self._blocks)

    def drain(self) -> None:
        """Apply the engine's events recorded since the last drain."""
        with self._lock:
            for event in self._source():
                self._apply(event.get("data") or {})

    def _apply(self, data: dict[str, Any]) -> None:
        kind = data.get("type")
        if kind == "stored":
            hashes = [int(b["block_hash"]) for b in data.get("blocks", ())]
            self._blocks.update(hashes)
            self._change("+", hashes)
        elif kind == "removed":
            hashes = [int(h) for h in data.get("block_hashes", ())]
            self._blocks.difference_update(hashes)
            self._change("-", hashes)
        elif kind == "created":  # a new cache: nothing of the old one is left
            self._blocks.clear()
            self._seq += 1
            self._changes.clear()
            self._floor = self._seq

    def _change(self, op: str, hashes: list[int]) -> None:
        self._seq += 1
        if len(self._changes) == self._changes.maxlen:
            self._floor = self._changes[0][0]  # the oldest change falls out of the ring
        self._changes.append((self._seq, op, hashes))

    def answer(self, cursor: str) -> str:
        """The JSON answer to a router whose index is at ``cursor`` (see the module
        docstring); drains first, so the answer is as fresh as the engine."""
        self.drain()
        with self._lock:
            seq = next((int(n) for epoch, _, n in (c.partition(":") for c in cursor.split(","))
                        if epoch == self.epoch and n.isdigit()), -1)
            head = {"epoch": self.epoch, "seq": self._seq}
            if not self._floor <= seq <= self._seq:
                return json.dumps({**head, "snapshot": sorted(self._blocks)})
            return json.dumps({**head, "changes": [[op, hashes] for n, op, hashes
                                                   in self._changes if n > seq]})
