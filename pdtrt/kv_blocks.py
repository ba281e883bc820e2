"""TensorRT-LLM's KV block hash: the reference engine's KV events carry the hashes a GPU
engine's would, and the router hashes a prompt's blocks the same way to look them up in the
KV index those events feed (:mod:`pdtrt.runtime.router.kv_index`).

A block is ``tokens_per_block`` prompt tokens; its hash chains its parent's (the block before
it in the sequence; 0 for the first). The rule is ``BlockKeyHasher::hash`` in
``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`` (NVIDIA/TensorRT-LLM 1.x): a 64-bit seed
``len(tokens) ^ parent * 0xbf58476d1ce4e5b9``, then per token a 32-bit integer mix of the token
id folded into the seed with the ``0x9e3779b9`` combine. The parts for token extra ids, LoRA
task ids, multimodal keys and cache salts are left out: the reference has none of them (a
request with a ``cache_salt`` is refused by the engine model before it reaches here). Which
blocks a prompt stores and may reuse follows the same file: full blocks only, and at most the
prompt's first ``len - 1`` tokens are reused, so that at least one token is computed and yields
the first output token's logits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["block_hash", "block_hashes", "reusable_blocks"]

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


def _mixed(tokens: Sequence[int]) -> list[int]:
    """Each token's 32-bit integer mix plus the ``0x9e3779b9`` constant (that sum is unsigned
    32-bit arithmetic, so it wraps before the 64-bit adds), vectorised."""
    a = np.asarray(tokens, dtype=np.uint64) & _M32
    a = (((a >> 16) ^ a) * 0x45D9F3B) & _M32
    a = (((a >> 16) ^ a) * 0x45D9F3B) & _M32
    return ((((a >> 16) ^ a) + 0x9E3779B9) & _M32).tolist()


def _fold(mixed: Sequence[int], parent: int) -> int:
    seed = (len(mixed) ^ (parent * 0xBF58476D1CE4E5B9)) & _M64
    for m in mixed:
        seed ^= (m + (seed << 6) + (seed >> 2)) & _M64
    return seed


def block_hash(tokens: Sequence[int], parent: int = 0) -> int:
    """The hash of one block of ``tokens`` whose parent block hashed to ``parent``."""
    return _fold(_mixed(tokens), parent)


def block_hashes(tokens: Sequence[int], tokens_per_block: int,
                 limit: int | None = None) -> list[int]:
    """The chained hashes of the full blocks of ``tokens`` (a partial last block has none),
    at most the first ``limit`` of them."""
    n = len(tokens) // tokens_per_block
    n = n if limit is None else min(n, limit)
    mixed = _mixed(tokens[:n * tokens_per_block])
    out: list[int] = []
    parent = 0
    for start in range(0, n * tokens_per_block, tokens_per_block):
        parent = _fold(mixed[start:start + tokens_per_block], parent)
        out.append(parent)
    return out


def reusable_blocks(prompt_len: int, tokens_per_block: int) -> int:
    """How many full blocks of a prompt may come from the cache: those within its first
    ``prompt_len - 1`` tokens."""
    return max(prompt_len - 1, 0) // tokens_per_block
