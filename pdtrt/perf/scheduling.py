"""How TensorRT-LLM admits and batches requests, as the analytical model uses it.

- **KV admission** (paged blocks of ``tokens_per_block``): the *capacity scheduler* admits a
  request only when its KV blocks are free. ``GUARANTEED_NO_EVICT`` (TensorRT-LLM's default)
  reserves the blocks of the whole sequence, prompt + every output token, at admission, so a
  running request is never paused; ``MAX_UTILIZATION`` reserves only what the request holds
  now, so more requests run at once (here: as many as fit at the average live length
  ``isl + osl/2``) at the price of pausing some when the cache fills. Either way
  ``max_batch_size`` caps the running requests. Clients beyond that capacity wait for a slot:
  the estimate is then *KV-bound* (or batch-bound).
- **Micro-batch scheduler**: every step carries one token for each running decode and fills
  the rest of the ``max_num_tokens`` budget with prompt tokens, in chunks when chunked context
  is on. New prompts are scheduled ahead of waiting decode work: a step with a prompt in it
  runs at the prompt's pace, and every running decode waits for it (head-of-line blocking;
  :mod:`pdtrt.perf.point` turns this into TPOT).
- **Arrivals in bursts**: prompts that reach the engine together (``burst``) are prefilled one
  after another, so the k-th waits for k-1 prefills; bursts queue behind each other like an
  M^X/D/1 queue (:func:`pdtrt.perf.queueing.mxd1_wait_s`). Independent (Poisson) arrivals are
  ``burst = 1``; a closed-loop benchmark whose clients all started together keeps them in
  step (equal output lengths finish together), which is what the calibration sample shows.
  When prompt queueing dominates, the estimate is *queue-bound*.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pdtrt.facts.memory import MemoryFit

__all__ = ["Admitting", "Capacity", "CapacityPolicy", "running_capacity"]


class CapacityPolicy(StrEnum):
    """TensorRT-LLM's ``CapacitySchedulerPolicy`` (the values are pdtrt's spelling)."""

    GUARANTEED_NO_EVICT = "guaranteed-no-evict"
    MAX_UTILIZATION = "max-utilization"


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """Requests that run at once on one instance, and what limits them."""

    seqs: int
    limit: str  # "KV cache" or "max_batch_size"
    kv_seqs: int


class Admitting(Protocol):
    """What admission needs of an instance (:class:`pdtrt.perf.hardware.Instance` is one)."""

    @property
    def capacity_policy(self) -> CapacityPolicy: ...

    @property
    def max_batch_size(self) -> int: ...

    def memory(self, seq_len: int) -> MemoryFit: ...


def running_capacity(inst: Admitting, isl: int, osl: int) -> Capacity:
    """Running requests of ``isl`` + ``osl`` tokens one instance admits (see module doc)."""
    if inst.capacity_policy is CapacityPolicy.MAX_UTILIZATION:
        kv = inst.memory(isl + max(osl // 2, 1)).max_concurrent_seqs
    else:
        kv = inst.memory(isl + osl).max_concurrent_seqs
    if kv <= inst.max_batch_size:
        return Capacity(seqs=kv, limit="KV cache", kv_seqs=kv)
    return Capacity(seqs=inst.max_batch_size, limit="max_batch_size", kv_seqs=kv)
