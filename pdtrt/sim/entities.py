"""The simulator's entities: requests, replicas (engine instances) and KV links.

Entities are the mutable state of one simulation run -- owned by its :class:`SimState`, never
shared between runs, never global. Events (``pdtrt/sim/events/``) change them; the scheduler
(:mod:`pdtrt.sim.scheduling`) reads them to form batches. Times are simulated seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from pdtrt.perf.hardware import Instance
from pdtrt.perf.scheduling import kv_blocks, reserved_tokens

__all__ = ["Link", "Replica", "ReplicaRole", "Request"]


class ReplicaRole(StrEnum):
    AGGREGATED = "aggregated"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(slots=True, kw_only=True)
class Request:
    """One request's progress. ``generated`` counts output tokens produced so far."""

    id: int
    arrival_s: float
    isl: int
    osl: int
    conversation: int = 0
    turn: int = 0
    prefilled: int = 0
    cached: int = 0  # prompt tokens whose KV came from the prefilling replica's block cache
    local_prefill: bool = False  # disaggregated, but prefilled by its decode replica
    queued_local: bool = False  # ... because the prefill pool was queued (prefill_queued)
    entry_tokens: int = 0  # what it counts in its entry replica's outstanding tokens
    decode_tokens: int = 0  # ... in its decode replica's
    kv_transfer_bytes: int = 0
    generated: int = 0
    blocks: int = 0  # KV blocks it holds on its aggregated or decode replica
    replay: int = 0  # output tokens to prefill again after a pause (max-utilization)
    first_token_s: float | None = None
    last_token_s: float | None = None
    done_s: float | None = None
    prefill_replica: int | None = None
    decode_replica: int | None = None
    kv_transfer_start_s: float | None = None
    kv_ready_s: float | None = None
    max_itl_s: float = 0.0

    @property
    def prefill_left(self) -> int:
        return self.isl + self.replay - self.prefilled

    @property
    def seq_len(self) -> int:
        return self.isl + self.osl

    @property
    def context_len(self) -> int:
        """Tokens in this request's KV cache now (prompt + generated)."""
        return self.prefilled + self.generated


@dataclass(slots=True, kw_only=True)
class Replica:
    """One engine instance: its queues, running set, KV blocks and busy time, and the prompt
    prefixes its block cache holds (``held``: conversation -> tokens in whole blocks; the
    shared prefix is ``prefix_warm``). Cached blocks take no KV memory here and are never
    evicted -- a simplification, optimistic for reuse under memory pressure."""

    index: int
    role: ReplicaRole
    instance: Instance
    kv_blocks: int
    waiting: deque[Request] = field(default_factory=deque)
    local_waiting: deque[Request] = field(default_factory=deque)  # decode: to prefill itself
    prefilling: list[Request] = field(default_factory=list)
    decoding: list[Request] = field(default_factory=list)
    used_blocks: int = 0
    busy: bool = False
    busy_s: float = 0.0
    num_steps: int = 0
    num_paused: int = 0  # requests paused to free KV blocks (max-utilization)
    peak_running: int = 0  # most requests it ran at once
    peak_used_blocks: int = 0  # most KV blocks it held at once
    prefix_warm: bool = False  # holds the workload's shared prefix (block reuse)
    held: dict[int, int] = field(default_factory=dict)
    outstanding_tokens: int = 0  # tokens its requests still stand for (kv-aware routing)

    def hold(self, req: Request, tokens: int) -> None:
        """Keep the whole blocks of the first ``tokens`` of ``req``'s sequence for reuse."""
        tpb = self.instance.tokens_per_block
        c = req.conversation
        self.held[c] = max(self.held.get(c, 0), tokens // tpb * tpb)

    def blocks_for(self, req: Request) -> int:
        """Blocks ``req`` must hold here for its next step, under the instance's capacity
        policy (:func:`pdtrt.perf.scheduling.reserved_tokens`)."""
        tokens = reserved_tokens(self.instance.capacity_policy, prompt=req.isl, output=req.osl,
                                 generated=req.generated)
        return kv_blocks(tokens, self.instance.tokens_per_block)

    def prefill_blocks_for(self, req: Request) -> int:
        return kv_blocks(req.isl, self.instance.tokens_per_block)

    def reserve(self, req: Request) -> bool:
        """Grow ``req``'s blocks here to :meth:`blocks_for`; False (nothing taken) when the
        cache has too few free blocks."""
        need = self.blocks_for(req) - req.blocks
        if self.used_blocks + need > self.kv_blocks:
            return False
        self.used_blocks += need
        req.blocks += need
        self.peak_used_blocks = max(self.peak_used_blocks, self.used_blocks)
        return True

    def release(self, req: Request) -> None:
        """Free the blocks ``req`` holds here."""
        self.used_blocks -= req.blocks
        req.blocks = 0

    @property
    def num_running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def load(self) -> int:
        """Requests this replica holds (routing uses it)."""
        return len(self.waiting) + len(self.local_waiting) + self.num_running


@dataclass(slots=True, kw_only=True)
class Link:
    """A FIFO KV-transfer path into one decode replica (its host link is the bottleneck)."""

    index: int
    queue: deque[Request] = field(default_factory=deque)
    busy: bool = False
    busy_s: float = 0.0
    num_transfers: int = 0
