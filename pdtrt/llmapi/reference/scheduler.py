"""The in-flight batching loop of one reference-engine instance.

One scheduler thread owns the engine. Each iteration it takes the submitted sequences, asks each
client whether it cancelled, lets the policy (:mod:`.batch_policy`) pick the work, prefills the
admitted prompts one by one (from their longest cached prefix when block reuse is on,
:mod:`.prefix_cache`), then advances every running sequence by one token in a single
batched ``decode_step``; the policy turns the sampled tokens into emissions, which go out
through each sequence's ``emit`` callback (called on the scheduler thread). New requests join
at the next iteration; finished and cancelled ones leave at once.

This module is the part with threads, queues and tensors -- which sequences run, and when one
ends, is the policy's. An exception in an iteration (an engine failure, a fault injected by
:class:`DecodeHook`, an ``emit`` that raised) fails the sequences the engine holds and the loop
goes on with the waiting ones.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from pdtrt.llmapi.reference.batch_policy import (
    Delivery,
    Emission,
    Seq,
    State,
    fail,
    postprocess,
    schedule,
)
from pdtrt.llmapi.reference.engine import (
    KV,
    ReferenceEngine,
    SequenceSampling,
    TokenLogprobs,
    draw_seed,
    process,
    sample,
)
from pdtrt.llmapi.reference.prefix_cache import PrefixCache

__all__ = ["TORCH_SAMPLER_SEED", "DecodeHook", "Emission", "Scheduler", "SeqRequest"]

log = logging.getLogger(__name__)

# How often a queue waiting for KV blocks looks again (held KV expires on the transceiver's
# clock, not on an event this loop sees)
_BLOCKS_POLL_S = 0.02

TORCH_SAMPLER_SEED = 42
"""The seed of TensorRT-LLM 1.2's TorchSampler: one torch generator, seeded once, that every
request of the LLM draws from (per-request seeds came with TensorRT-LLM #17172). So a sampled
request's tokens depend on the draws before it, not on its ``seed``."""


class DecodeHook(Protocol):
    """Called before each batched decode step with the batch's request ids; raising fails the
    step (the engine model's fault injection, :mod:`pdtrt.runtime.faults`)."""

    def before_decode(self, request_ids: Sequence[str]) -> None: ...


@dataclass(kw_only=True, eq=False)
class SeqRequest(Seq):
    """A submitted sequence: the policy's :class:`~.batch_policy.Seq` plus what the loop needs to
    run it and answer its client."""

    sampling: SequenceSampling
    emit: Callable[[Emission], None]
    is_cancelled: Callable[[], bool] = lambda: False
    imported_kv: KV | None = None  # generation-only


class Scheduler:
    """The loop: a thread, the engine's only caller, running :mod:`.batch_policy`'s plans."""

    def __init__(self, engine: ReferenceEngine, *, max_batch_size: int,
                 max_num_tokens: int, faults: DecodeHook | None = None,
                 prefix_cache: PrefixCache | None = None, max_num_blocks: int | None = None,
                 held_blocks: Callable[[], int] = lambda: 0, shared_seed: int | None = None
                 ) -> None:
        self.engine = engine
        self.faults = faults
        self.prefix_cache = prefix_cache  # None: no block reuse
        self.held_blocks = held_blocks  # KV blocks held for pickup (context-only results)
        # TorchSampler's one generator for all draws (owned by the loop thread, the only one
        # that draws); None: each draw seeded by its request's seed and position (draw_seed)
        self._shared = None if shared_seed is None else \
            torch.Generator().manual_seed(shared_seed)
        self.state: State[SeqRequest] = State(
            max_batch_size=max_batch_size, max_num_tokens=max_num_tokens,
            max_num_blocks=max_num_blocks, tokens_per_block=engine.layout.tokens_per_block)
        self._inbox: queue.Queue[SeqRequest | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="pdtrt-scheduler", daemon=True)
        self._stopped = False
        self.steps = 0  # batched decode steps run (for tests and metrics)
        self.max_batch_seen = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped = True
        self._inbox.put(None)
        self._thread.join(timeout=10)

    def submit(self, seq: SeqRequest) -> None:
        self._inbox.put(seq)

    @property
    def max_batch_size(self) -> int:
        return self.state.max_batch_size

    @property
    def max_num_tokens(self) -> int:
        return self.state.max_num_tokens

    @property
    def num_active(self) -> int:
        return self.state.num_active

    @property
    def num_running(self) -> int:
        return len(self.state.running)

    @property
    def num_queued(self) -> int:
        """Sequences submitted and not yet admitted."""
        return len(self.state.waiting) + self._inbox.qsize()

    @property
    def num_kv_tokens(self) -> int:
        """Tokens of KV the running sequences hold (read from another thread: a snapshot)."""
        return sum(s.kv[0][0].shape[2] for s in list(self.state.running) if s.kv is not None)

    # -- the loop ----------------------------------------------------------------------------
    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block)
            while True:
                if item is not None:
                    self.state.waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _loop(self) -> None:
        while not self._stopped:
            waiting_only = bool(self.state.waiting) and not self.state.running
            if waiting_only:  # the queue waits for KV blocks: wait for a change, not spin
                self._wait_for_blocks()
            self._drain(block=not self.state.num_active)
            try:
                self._iteration()
            except Exception as exc:  # an engine failure must not hang the requests it holds
                log.exception("scheduler iteration failed")
                _deliver(fail(self.state, f"engine failure: {exc}"))

    def _wait_for_blocks(self) -> None:
        try:
            item = self._inbox.get(timeout=_BLOCKS_POLL_S)
        except queue.Empty:
            return
        if item is not None:
            self.state.waiting.append(item)

    def _iteration(self) -> None:
        self.state.num_held_blocks = self.held_blocks()
        for seq in (*self.state.running, *self.state.waiting):
            seq.cancelled = _client_cancelled(seq)
        plan = schedule(self.state)
        _deliver(plan.emissions)
        for seq in plan.imported:
            assert seq.imported_kv is not None, "generation-only sequence without imported KV"
            seq.kv = seq.imported_kv
        for seq in plan.prefill:  # one at a time, each first token out as soon as it is sampled
            logits, seq.kv = self._prefill(seq.prompt)
            sampled = _sampled(seq, logits, self._shared)
            self._deliver_and_keep(postprocess(self.state, [sampled]))
        batch = [s for s in plan.decode if not s.done]
        if batch:
            self._decode(batch)

    def _prefill(self, prompt: list[int]) -> tuple[torch.Tensor, KV]:
        """The prompt's last logits and KV; with a prefix cache, from its longest cached chain
        of leading blocks on, and the prompt's full blocks are kept for later prompts."""
        cache = self.prefix_cache
        if cache is None:
            return self.engine.prefill(prompt)
        cached, past = cache.match(prompt)
        logits, kv = self.engine.prefill(prompt[cached:], past)
        cache.store(prompt, kv, in_use_blocks=self.num_kv_tokens // cache.tokens_per_block)
        return logits, kv

    def _decode(self, batch: list[SeqRequest]) -> None:
        self.max_batch_seen = max(self.max_batch_seen, len(batch))
        if self.faults is not None:
            self.faults.before_decode([s.request_id for s in batch])
        results = self.engine.decode_step([(s.generated[-1], s.kv) for s in batch])
        self.steps += 1
        tokens = []
        for seq, (logits, kv) in zip(batch, results, strict=True):
            seq.kv = kv
            tokens.append(_sampled(seq, logits, self._shared))
        self._deliver_and_keep(postprocess(self.state, tokens))

    def _deliver_and_keep(self, deliveries: list[Delivery[SeqRequest]]) -> None:
        """With block reuse, first keep the full blocks of each sequence that ended normally
        -- its prompt and output, less the last token (whose KV was never computed), as
        TensorRT-LLM stores a released sequence's blocks (``storeBlocksForReuse``,
        kvCacheManager.cpp) -- so that a client holding the final answer finds them (and their
        events) there; then emit. A follow-up turn that resends the answer reuses it too. A
        failure to keep them is logged and costs nobody their answer."""
        cache = self.prefix_cache
        if cache is not None:
            try:
                for seq, em in deliveries:
                    if em.final and em.error is None and not em.cancelled and seq.kv:
                        held = seq.kv[0][0].shape[2]
                        cache.store((seq.prompt + seq.generated)[:held], seq.kv,
                                    in_use_blocks=self.num_kv_tokens // cache.tokens_per_block)
            except Exception:
                log.exception("keeping finished sequences' blocks for reuse")
        _deliver(deliveries)


def _sampled(seq: SeqRequest, logits: torch.Tensor, shared: torch.Generator | None
             ) -> tuple[SeqRequest, list[int], list[TokenLogprobs]]:
    """``seq``, its next token, and the token's log-probabilities if it asked."""
    token, entry = _sample(seq, logits, shared)
    return seq, [token], [] if entry is None else [entry]


def _sample(seq: SeqRequest, logits: torch.Tensor, shared: torch.Generator | None
            ) -> tuple[int, TokenLogprobs | None]:
    """The next token of ``seq`` and its log-probabilities (None unless asked); a sampled token
    is drawn from ``shared`` when given (TorchSampler), else from its own seeded generator."""
    s = seq.sampling
    scores = process(logits, s, seq.prompt + seq.generated if s.reads_history else (),
                     len(seq.generated), seq.end_id)
    if s.greedy:
        generator = None
    elif shared is not None:
        generator = shared
    else:
        # keyed by the position in the whole sequence, not in the output: a request continued
        # from a prompt that holds its output so far (the router's migration) draws the same
        generator = torch.Generator().manual_seed(
            draw_seed(s.seed, len(seq.prompt) + len(seq.generated)))
    return sample(scores, s, generator)


def _client_cancelled(seq: SeqRequest) -> bool:
    try:
        return bool(seq.is_cancelled())
    except Exception:  # a vanished client counts as cancelled
        return True


def _deliver(deliveries: Iterable[Delivery[SeqRequest]]) -> None:
    """Emit each emission; one ``emit`` raising does not cost the others theirs (a final
    emission lost would hang its client). The first exception is raised after all are out."""
    errors = []
    for seq, emission in deliveries:
        try:
            seq.emit(emission)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
