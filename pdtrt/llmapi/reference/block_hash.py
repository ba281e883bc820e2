"""TensorRT-LLM's KV block hash, so that the reference's KV events carry the hashes a GPU
engine's would.

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

__all__ = ["block_hash", "block_hashes", "reusable_blocks"]

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1


def _mix32(token: int) -> int:
    a = token & _M32
    a = (((a >> 16) ^ a) * 0x45D9F3B) & _M32
    a = (((a >> 16) ^ a) * 0x45D9F3B) & _M32
    return (a >> 16) ^ a


def block_hash(tokens: Sequence[int], parent: int = 0) -> int:
    """The hash of one block of ``tokens`` whose parent block hashed to ``parent``."""
    seed = (len(tokens) ^ (parent * 0xBF58476D1CE4E5B9)) & _M64
    for token in tokens:
        # uint32 + unsigned-int literal: that sum wraps at 32 bits before the 64-bit adds
        seed ^= (((_mix32(token) + 0x9E3779B9) & _M32) + (seed << 6) + (seed >> 2)) & _M64
    return seed


def block_hashes(tokens: Sequence[int], tokens_per_block: int) -> list[int]:
    """The chained hashes of the full blocks of ``tokens`` (a partial last block has none)."""
    out: list[int] = []
    parent = 0
    for start in range(0, len(tokens) - tokens_per_block + 1, tokens_per_block):
        parent = block_hash(tokens[start:start + tokens_per_block], parent)
        out.append(parent)
    return out


def reusable_blocks(prompt_len: int, tokens_per_block: int) -> int:
    """How many full blocks of a prompt may come from the cache: those within its first
    ``prompt_len - 1`` tokens."""
    return max(prompt_len - 1, 0) // tokens_per_block
