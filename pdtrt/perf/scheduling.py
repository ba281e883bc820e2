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
  the rest of the ``max_num_tokens`` budget (and of ``max_batch_size``'s request slots) with
  every waiting prompt that fits, in chunks when chunked context is on
  (:mod:`pdtrt.perf.batching`). A step with prompts in it runs at their pace, and every
  running decode waits for it (head-of-line blocking; :mod:`pdtrt.perf.point` turns this
  into TPOT).
- **Arrivals in bursts**: prompts that reach the engine together (``burst``) share a step as
  far as the budget allows; a burst larger than a step is prefilled a step-full after
  another, and prompts too long to share a step one after another (an M^X/D/1 queue,
  :func:`pdtrt.perf.queueing.mxd1_wait_s`). Independent (Poisson) arrivals are
  ``burst = 1``; a closed-loop benchmark whose clients all started together keeps them in
  step (equal output lengths finish together), which is what the calibration sample shows.
  When prompts arrive near the most the steps can take, the estimate is *queue-bound*.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pdtrt.facts.memory import MemoryFit

__all__ = ["Admitting", "Capacity", "CapacityPolicy", "kv_blocks", "reserved_tokens",
           "running_capacity"]


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


def reserved_tokens(policy: CapacityPolicy, *, prompt: int, output: int,
                    generated: int) -> int:
    """KV tokens a running request of ``prompt`` + ``output`` tokens has reserved once it has
    ``generated`` output tokens: under ``GUARANTEED_NO_EVICT`` the whole sequence from
    admission on; under ``MAX_UTILIZATION`` what it holds after its next step.
    ``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp`` (NVIDIA/TensorRT-LLM at
    02a10fed0dbf5db74c7da035be9c5fbef6d2df7a): ``GuaranteedNoEvictScheduler`` admits a pending
    request only while the blocks to drive every scheduled request to completion are free,
    and stops at the first that does not fit; ``MaxUtilizationScheduler`` counts the blocks of
    each request's next step and, when one does not fit, pauses the last started request
    (frees its blocks) and tries again. The analytical model and the simulator
    (:mod:`pdtrt.sim.scheduling`) both reserve by this function."""
    if policy is CapacityPolicy.MAX_UTILIZATION:
        return prompt + min(generated + 1, output)
    return prompt + output


def kv_blocks(tokens: int, tokens_per_block: int) -> int:
    """Paged KV blocks that hold ``tokens``."""
    return -(-tokens // tokens_per_block)


def running_capacity(inst: Admitting, isl: int, osl: int) -> Capacity:
    """Running requests of ``isl`` + ``osl`` tokens one instance admits (see module doc):
    the sequences that fit at their reservation averaged over a request's life."""
    policy = inst.capacity_policy
    mid = max(osl // 2, 1) - 1 if policy is CapacityPolicy.MAX_UTILIZATION else 0
    kv = inst.memory(reserved_tokens(policy, prompt=isl, output=osl,
                                     generated=mid)).max_concurrent_seqs
    if kv <= inst.max_batch_size:
        return Capacity(seqs=kv, limit="KV cache", kv_seqs=kv)
    return Capacity(seqs=inst.max_batch_size, limit="max_batch_size", kv_seqs=kv)
