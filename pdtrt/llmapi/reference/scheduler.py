"""In-flight batching of the sequences one reference-engine instance holds.

One scheduler thread owns the engine. Each iteration it admits waiting sequences (up to
``max_batch_size`` running, and up to ``max_num_tokens`` prompt tokens of prefill per
iteration -- at least one prompt, so a long one cannot starve), prefills them one by one, then
advances *every* running sequence by one token in a single batched ``decode_step``. New requests
join at the next iteration; finished and cancelled ones leave at once. Results go out through
each sequence's ``emit`` callback (called on the scheduler thread).

A context-only sequence ends after its first token and hands back its prompt KV; a
generation-only sequence starts from imported KV and first token(s) (which it emits again, as
TensorRT-LLM's generation-only responses cover the whole output).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from pdtrt.engine_io import RequestType
from pdtrt.llmapi.reference.engine import KV, ReferenceEngine, Sampling, sample

__all__ = ["DecodeHook", "Emission", "Scheduler", "SeqRequest"]

log = logging.getLogger(__name__)


class DecodeHook(Protocol):
    """Called before each batched decode step with the batch's request ids; raising fails the
    step (the engine model's fault injection, :mod:`pdtrt.runtime.engine.faults`)."""

    def before_decode(self, request_ids: Sequence[str]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Emission:
    tokens: tuple[int, ...]  # tokens new in this emission
    final: bool
    kv: KV | None = None  # context-only: the prompt's KV, on the final emission
    error: str | None = None
    cancelled: bool = False
    first_scheduled_ns: int = 0
    first_token_ns: int = 0


@dataclass(kw_only=True)
class SeqRequest:
    request_id: str
    prompt: list[int]
    max_new_tokens: int
    end_id: int | None
    sampling: Sampling
    mode: RequestType
    emit: Callable[[Emission], None]
    is_cancelled: Callable[[], bool] = lambda: False
    imported_kv: KV | None = None  # generation-only
    first_tokens: tuple[int, ...] = ()  # generation-only
    # scheduler state
    generated: list[int] = field(default_factory=list)
    kv: KV | None = None
    generator: torch.Generator | None = None
    first_scheduled_ns: int = 0
    first_token_ns: int = 0
    done: bool = False  # the final emission went out


class Scheduler:
    def __init__(self, engine: ReferenceEngine, *, max_batch_size: int,
                 max_num_tokens: int, faults: DecodeHook | None = None) -> None:
        self.engine = engine
        self.faults = faults
        self.max_batch_size = max_batch_size
        self.max_num_tokens = max_num_tokens
        self._inbox: queue.Queue[SeqRequest | None] = queue.Queue()
        self._running: list[SeqRequest] = []
        self._waiting: list[SeqRequest] = []
        self._starting: list[SeqRequest] = []  # admitted this iteration
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
    def num_active(self) -> int:
        return len(self._running) + len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_queued(self) -> int:
        """Sequences submitted and not yet admitted."""
        return len(self._waiting) + self._inbox.qsize()

    @property
    def num_kv_tokens(self) -> int:
        """Tokens of KV the running sequences hold (read from another thread: a snapshot)."""
        return sum(s.kv[0][0].shape[2] for s in list(self._running) if s.kv is not None)

    # -- the loop ----------------------------------------------------------------------------
    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(block=block)
            while True:
                if item is not None:
                    self._waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass

    def _loop(self) -> None:
        while not self._stopped:
            self._drain(block=not (self._running or self._waiting))
            try:
                self._iteration()
            except Exception as exc:  # an engine failure must not hang the requests it holds
                log.exception("scheduler iteration failed")
                # The sequences the engine was working on fail; those still waiting never
                # touched it and stay queued.
                for seq in self._running + self._starting:
                    if not seq.done:
                        self._finish(seq, error=f"engine failure: {exc}")
                self._running, self._starting = [], []

    def _iteration(self) -> None:
        admitted, budget = [], self.max_num_tokens
        while self._waiting and len(self._running) + len(admitted) < self.max_batch_size:
            seq = self._waiting[0]
            cost = 0 if seq.mode == RequestType.GENERATION_ONLY else len(seq.prompt)
            if admitted and cost > budget:
                break
            budget -= cost
            admitted.append(self._waiting.pop(0))
        self._starting = admitted
        for seq in admitted:
            self._start(seq)
        self._starting = []
        # Over a copy: a cancelled sequence removes itself from _running (_finish), and
        # filtering the list it shrinks skipped -- and so lost -- the sequence after it.
        self._running = [s for s in list(self._running) if not self._cancelled(s)]
        if self._running:
            self._decode()

    def _start(self, seq: SeqRequest) -> None:
        seq.first_scheduled_ns = time.time_ns()
        if self._cancelled(seq):
            return
        seq.generator = torch.Generator().manual_seed(seq.sampling.seed)
        if seq.mode == RequestType.GENERATION_ONLY:
            assert seq.imported_kv is not None
            seq.kv = seq.imported_kv
            seq.first_token_ns = time.time_ns()
            self._accept(seq, list(seq.first_tokens))
            return
        logits, seq.kv = self.engine.prefill(seq.prompt)
        token = sample(logits, seq.sampling, seq.generator)
        seq.first_token_ns = time.time_ns()
        if seq.mode == RequestType.CONTEXT_ONLY:
            stop = seq.end_id is not None and token == seq.end_id
            seq.generated = [] if stop else [token]
            self._finish(seq, kv=seq.kv)
            return
        self._accept(seq, [token])

    def _accept(self, seq: SeqRequest, tokens: list[int]) -> None:
        """Append ``tokens``; emit them; finish the sequence or keep it running."""
        new = []
        for token in tokens:
            if seq.end_id is not None and token == seq.end_id:
                self._emit_then_finish(seq, new)
                return
            seq.generated.append(token)
            new.append(token)
            if len(seq.generated) >= seq.max_new_tokens:
                self._emit_then_finish(seq, new)
                return
        seq.emit(Emission(tokens=tuple(new), final=False, first_scheduled_ns=seq.first_scheduled_ns,
                          first_token_ns=seq.first_token_ns))
        if seq not in self._running:
            self._running.append(seq)

    def _emit_then_finish(self, seq: SeqRequest, new: list[int]) -> None:
        if seq in self._running:
            self._running.remove(seq)
        seq.done = True
        seq.emit(Emission(tokens=tuple(new), final=True, first_scheduled_ns=seq.first_scheduled_ns,
                          first_token_ns=seq.first_token_ns))

    def _decode(self) -> None:
        batch = self._running[:]
        self.max_batch_seen = max(self.max_batch_seen, len(batch))
        if self.faults is not None:
            self.faults.before_decode([s.request_id for s in batch])
        results = self.engine.decode_step([(s.generated[-1], s.kv) for s in batch])
        self.steps += 1
        for seq, (logits, kv) in zip(batch, results, strict=True):
            seq.kv = kv
            self._accept(seq, [sample(logits, seq.sampling, seq.generator)])

    def _cancelled(self, seq: SeqRequest) -> bool:
        try:
            cancelled = seq.is_cancelled()
        except Exception:  # a vanished client counts as cancelled
            cancelled = True
        if cancelled:
            self._finish(seq, cancelled=True)
        return cancelled

    def _finish(self, seq: SeqRequest, *, kv: KV | None = None, error: str | None = None,
                cancelled: bool = False) -> None:
        if seq in self._running:
            self._running.remove(seq)
        seq.done = True
        tokens = tuple(seq.generated) if kv is not None else ()
        seq.emit(Emission(tokens=tokens, final=True, kv=kv, error=error, cancelled=cancelled,
                          first_scheduled_ns=seq.first_scheduled_ns,
                          first_token_ns=seq.first_token_ns))
