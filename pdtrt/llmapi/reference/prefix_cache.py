"""The reference engine's reusable KV blocks, and the KV cache events they publish.

TensorRT-LLM 1.2 with ``kv_cache_config.enable_block_reuse`` keeps the full blocks of each
finished prompt in a radix tree of blocks (each keyed by its tokens under its parent), reuses
the longest chain that matches a new prompt's leading blocks, and evicts least recently used
leaf blocks when it needs room; with ``event_buffer_max_size > 0`` it records what happened as
KV cache events that ``LLM.get_kv_cache_events`` drains. :class:`PrefixCache` does the same for
the reference engine, whose KV is per-sequence tensors: a stored block holds a copy of its
``tokens_per_block`` positions of every layer, and a hit concatenates the chain's copies into
the past KV the engine then prefills the rest of the prompt on.

The events have upstream's JSON shape (``KVCacheEventSerializer`` in ``tensorrt_llm/_utils.py``,
NVIDIA/TensorRT-LLM ed53795b): ``{"event_id", "data", "window_size"}`` with ``data`` one of
``{"type": "created", "num_blocks_per_cache_level"}``, ``{"type": "stored", "parent_hash",
"blocks": [{"type": "stored_block", "block_hash", "tokens": [{"type": "unique_token",
"token_id", "token_extra_id"}], "cache_level", "priority"}]}`` and ``{"type": "removed",
"block_hashes"}``; block hashes are TensorRT-LLM's (:mod:`.block_hash`). Not modelled: the
``updated`` events (priority and cache-level changes: the reference has one cache level and no
retention priorities) and partial-block reuse. The buffer keeps the newest
``event_buffer_max_size`` events, like upstream's bounded event queue.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pdtrt.kv_blocks import block_hash, reusable_blocks
from pdtrt.llmapi.reference.engine import KV

__all__ = ["PrefixCache", "BlockReuseStats"]

_DEFAULT_PRIORITY = 35  # KvCacheRetentionConfig::kDefaultRetentionPriority
_PRIMARY = 0  # cache level of GPU memory upstream; the reference has only this one


@dataclass(eq=False)
class _Block:
    hash: int
    parent: _Block | None
    tokens: tuple[int, ...]
    kv: KV  # this block's positions, every layer: [1, H, tokens_per_block, D]
    children: dict[tuple[int, ...], _Block] = field(default_factory=dict)


@dataclass
class BlockReuseStats:
    """Counts as TensorRT-LLM's ``KvCacheStats`` names them: blocks a prompt took from the
    cache (``reusedBlocks``) and full prompt blocks it had to compute (``missedBlocks``)."""

    reused_blocks: int = 0
    missed_blocks: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.reused_blocks + self.missed_blocks
        return self.reused_blocks / total if total else 0.0


class PrefixCache:
    """Reusable prompt blocks of one engine instance, at most ``max_blocks`` of them.

    ``match`` and ``store`` are called by the scheduler thread; ``events`` (and ``stats``) by
    any thread."""

    def __init__(self, *, tokens_per_block: int, max_blocks: int, event_buffer_max_size: int = 0,
                 window_size: int = 0) -> None:
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
        self.tokens_per_block = tokens_per_block
        self.max_blocks = max_blocks
        self.window_size = window_size
        self.stats = BlockReuseStats()
        self._root: dict[tuple[int, ...], _Block] = {}
        self._lru: OrderedDict[int, _Block] = OrderedDict()  # every block; oldest use first
        self._events: deque[dict[str, Any]] = deque(maxlen=event_buffer_max_size or None)
        self._recording = event_buffer_max_size > 0
        self._event_ids = itertools.count()
        self._lock = threading.Lock()
        self._record({"type": "created", "num_blocks_per_cache_level": [max_blocks, 0]})

    @property
    def num_blocks(self) -> int:
        return len(self._lru)

    # -- the scheduler's side ----------------------------------------------------------------
    def match(self, prompt: Sequence[int]) -> tuple[int, KV | None]:
        """The cached KV of the longest chain of ``prompt``'s leading reusable blocks: how many
        tokens it covers, and their KV (None when nothing matched)."""
        tpb = self.tokens_per_block
        chain: list[_Block] = []
        level = self._root
        for i in range(reusable_blocks(len(prompt), tpb)):
            block = level.get(tuple(prompt[i * tpb:(i + 1) * tpb]))
            if block is None:
                break
            chain.append(block)
            level = block.children
        full = len(prompt) // tpb
        self.stats.reused_blocks += len(chain)
        self.stats.missed_blocks += full - len(chain)
        for block in chain:
            self._lru.move_to_end(block.hash)
        if not chain:
            return 0, None
        layers = len(chain[0].kv)
        kv = tuple((torch.cat([b.kv[layer][0] for b in chain], dim=2),
                    torch.cat([b.kv[layer][1] for b in chain], dim=2)) for layer in range(layers))
        return len(chain) * tpb, kv

    def store(self, prompt: Sequence[int], kv: KV, *, in_use_blocks: int = 0) -> None:
        """Keep the full blocks of a prefilled ``prompt`` (``kv`` covers at least the prompt),
        then evict least recently used leaves while the cache holds more than ``max_blocks``
        minus the ``in_use_blocks`` running sequences occupy."""
        tpb = self.tokens_per_block
        level, parent, stored = self._root, None, []
        parent_hash: int | None = None
        for i in range(len(prompt) // tpb):
            tokens = tuple(prompt[i * tpb:(i + 1) * tpb])
            block = level.get(tokens)
            if block is None:
                piece = tuple((k[:, :, i * tpb:(i + 1) * tpb].clone(),
                               v[:, :, i * tpb:(i + 1) * tpb].clone()) for k, v in kv)
                block = _Block(hash=block_hash(tokens, parent.hash if parent else 0),
                               parent=parent, tokens=tokens, kv=piece)
                if not stored:
                    parent_hash = parent.hash if parent else None
                level[tokens] = block
                self._lru[block.hash] = block
                stored.append(block)
            else:
                self._lru.move_to_end(block.hash)
            level, parent = block.children, block
        if stored:
            self._record({"type": "stored", "parent_hash": parent_hash,
                          "blocks": [_stored_block(b) for b in stored]})
        self._evict(max(self.max_blocks - in_use_blocks, 0), keep=set(map(id, stored)))

    def _evict(self, room: int, keep: set[int]) -> None:
        """Least recently used leaves first (a parent becomes a leaf once its children went),
        never a block just stored."""
        removed: list[int] = []
        while len(self._lru) > room:
            victim = next((b for b in self._lru.values()
                           if not b.children and id(b) not in keep), None)
            if victim is None:
                break
            siblings = victim.parent.children if victim.parent else self._root
            del siblings[victim.tokens]
            del self._lru[victim.hash]
            removed.append(victim.hash)
        if removed:
            self._record({"type": "removed", "block_hashes": removed})

    def _record(self, data: dict[str, Any]) -> None:
        if not self._recording:
            return
        with self._lock:
            self._events.append({"event_id": next(self._event_ids), "data": data,
                                 "window_size": self.window_size})

    # -- any thread --------------------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        """Drain the recorded events, oldest first."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
        return out


def _stored_block(block: _Block) -> dict[str, Any]:
    return {"type": "stored_block", "block_hash": block.hash,
            "tokens": [{"type": "unique_token", "token_id": t, "token_extra_id": 0}
                       for t in block.tokens],
            "cache_level": _PRIMARY, "priority": _DEFAULT_PRIORITY}
