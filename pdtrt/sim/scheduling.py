"""Pluggable scheduling: batch formation per replica and routing across replicas.

Both are enum-keyed registries, so a new policy is one function and one enum member.

Batch policies (how one replica fills a step, TensorRT-LLM inflight batching):

- ``chunked``: every running decode sequence gets its token, then prefill chunks fill the rest
  of ``max_num_tokens`` (TensorRT-LLM ``enable_chunked_context``; Sarathi-style). Partially
  prefilled prompts go first, then new requests FCFS while KV blocks and ``max_batch_size``
  allow.
- ``whole-prompt``: a prompt is prefilled in one step or waits (chunked context off); prompts
  longer than ``max_num_tokens`` are still chunked, as the engine would refuse them otherwise.

KV admission on aggregated and decode replicas follows the instance's capacity policy, by the
rule the analytical model uses (:func:`pdtrt.perf.scheduling.reserved_tokens`):
guaranteed-no-evict reserves the blocks of the whole sequence (prompt + output) at admission;
max-utilization only those of the next step, growing them every step, and when a running
request's next block does not fit the last started request is paused: its blocks are freed
and it is prefilled again (prompt and the tokens it had generated) when it is admitted again.
Prefill replicas reserve the prompt only.

Routing: ``round-robin`` or ``least-loaded`` (fewest requests held, then the least recently
chosen, as the router's pools break ties); ``kv-aware`` is least-loaded with a cost first (each
request's net-new tokens per replica, which the state knows: :meth:`pdtrt.sim.state.SimState.
choose`). ``kv-capacity`` (decode only; the router's ``kv_capacity``) is least-loaded with the
used fraction of the replica's KV blocks after the request first, so a decode pool mixing GPU
types (:attr:`pdtrt.sim.config.SimConfig.extra_decode`) fills in proportion.

A decode replica's ``local_waiting`` requests (conditional disaggregation: it prefills them
itself) are admitted like an aggregated replica's new requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pdtrt.perf.scheduling import CapacityPolicy
from pdtrt.perf.step import StepWork, decode_work, prefill_chunk_work
from pdtrt.sim.entities import Replica, ReplicaRole, Request

__all__ = ["BATCH_POLICIES", "ROUTERS", "Batch", "BatchPolicy", "RoutingPolicy", "form_batch"]


class BatchPolicy(StrEnum):
    CHUNKED = "chunked"
    WHOLE_PROMPT = "whole-prompt"


class RoutingPolicy(StrEnum):
    ROUND_ROBIN = "round-robin"
    LEAST_LOADED = "least-loaded"
    KV_AWARE = "kv-aware"  # least net-new prompt tokens x weight + outstanding tokens
    KV_CAPACITY = "kv-capacity"  # decode: the least used fraction of its KV blocks after it


@dataclass(frozen=True, kw_only=True)
class Batch:
    """One step's contents: prefill chunks ``(request, tokens)`` and decoding requests."""

    chunks: tuple[tuple[Request, int], ...]
    decodes: tuple[Request, ...]
    work: StepWork


def _admit(replica: Replica, req: Request) -> bool:
    if replica.role is not ReplicaRole.PREFILL:
        return replica.reserve(req)
    need = replica.prefill_blocks_for(req)
    if replica.used_blocks + need > replica.kv_blocks:
        return False
    replica.used_blocks += need
    return True


def _pause(replica: Replica, req: Request) -> None:
    """Max-utilization: free ``req``'s blocks; it waits first in line to be prefilled again."""
    replica.decoding.remove(req)
    replica.release(req)
    req.replay, req.prefilled = req.generated, 0
    replica.num_paused += 1
    (replica.local_waiting if replica.role is ReplicaRole.DECODE
     else replica.waiting).appendleft(req)


def _grow(replica: Replica) -> None:
    """Max-utilization: every running decode takes the blocks of its next token, in order;
    when one does not fit, the last started request is paused and it tries again."""
    i = 0
    while i < len(replica.decoding):
        if replica.reserve(replica.decoding[i]):
            i += 1
        else:
            _pause(replica, replica.decoding[-1])


def _fill(replica: Replica, chunked: bool) -> Batch | None:
    inst = replica.instance
    if (inst.capacity_policy is CapacityPolicy.MAX_UTILIZATION
            and replica.role is not ReplicaRole.PREFILL):
        _grow(replica)
    decodes = tuple(replica.decoding[: inst.max_batch_size])
    budget = inst.max_num_tokens - len(decodes)
    work = decode_work(len(decodes), sum(r.context_len for r in decodes))
    chunks: list[tuple[Request, int]] = []

    def take(req: Request) -> int:
        left = req.prefill_left
        if chunked or left > inst.max_num_tokens:
            return min(left, budget)
        return left if left <= budget else 0

    for req in replica.prefilling:
        if budget <= 0:
            break
        n = take(req)
        if n == 0:
            break
        chunks.append((req, n))
        budget -= n
    queue = replica.local_waiting if replica.role is ReplicaRole.DECODE else replica.waiting
    while queue and budget > 0 and replica.num_running < inst.max_batch_size:
        req = queue[0]
        n = take(req)
        if n == 0 or not _admit(replica, req):
            break
        queue.popleft()
        replica.prefilling.append(req)
        chunks.append((req, n))
        budget -= n
    replica.peak_running = max(replica.peak_running, replica.num_running)
    for req, n in chunks:
        work = work + prefill_chunk_work(n, req.prefilled, last=n == req.prefill_left)
    if not chunks and not decodes:
        return None
    return Batch(chunks=tuple(chunks), decodes=decodes, work=work)


def _chunked(replica: Replica) -> Batch | None:
    return _fill(replica, chunked=True)


def _whole_prompt(replica: Replica) -> Batch | None:
    return _fill(replica, chunked=False)


BATCH_POLICIES: dict[BatchPolicy, Callable[[Replica], Batch | None]] = {
    BatchPolicy.CHUNKED: _chunked,
    BatchPolicy.WHOLE_PROMPT: _whole_prompt,
}


def form_batch(policy: BatchPolicy, replica: Replica) -> Batch | None:
    """The next step of ``replica`` under ``policy``, or None when it has nothing to run."""
    return BATCH_POLICIES[policy](replica)


Cost = Callable[[Replica], float]  # what a replica costs a request, before its load


class Router(Protocol):
    def __call__(self, replicas: Sequence[Replica], cost: Cost | None = None) -> Replica: ...


class _RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def __call__(self, replicas: Sequence[Replica], cost: Cost | None = None) -> Replica:
        replica = replicas[self._next % len(replicas)]
        self._next += 1
        return replica


class _LeastLoaded:
    """The least loaded replica; among equals the one chosen least recently, as the router
    breaks its ties (``pdtrt.runtime.router.pool.Pool.pick``: ``last_chosen``) -- an idle pool
    takes turns instead of sending everything to its first replica."""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}  # replica index -> the choice that last took it
        self._choices = 0

    def __call__(self, replicas: Sequence[Replica], cost: Cost | None = None) -> Replica:
        replica = min(replicas, key=lambda r: (
            cost(r) if cost else 0, r.load, self._last.get(r.index, -1), r.index))
        self._choices += 1
        self._last[replica.index] = self._choices
        return replica


# Factories, so every simulation run owns its router state (no shared counters).
ROUTERS: dict[RoutingPolicy, Callable[[], Router]] = {
    RoutingPolicy.ROUND_ROBIN: _RoundRobin,
    RoutingPolicy.LEAST_LOADED: _LeastLoaded,
    RoutingPolicy.KV_CAPACITY: _LeastLoaded,  # with its cost first (State.choose)
}
