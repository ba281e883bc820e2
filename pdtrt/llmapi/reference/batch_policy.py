"""The in-flight batching policy: which sequences run each iteration, and what their tokens do.

Pure decisions over plain data, shaped like nano-vllm's scheduler: :func:`schedule` picks the
iteration's work and :func:`postprocess` applies a step's new tokens; both return the
:class:`Emission` each affected sequence must get. No threads, queues, clock or tensors here, so
every rule is testable with lists of ints; :class:`~.scheduler.Scheduler` is the loop that owns
the thread, runs the engine and delivers the emissions.

Each iteration drops the cancelled sequences, then admits waiting ones in arrival order while fewer
than ``max_batch_size`` run, their prompts fit in ``max_num_tokens`` of prefill (the first
admitted always fits, so a long prompt cannot starve; a generation-only sequence costs nothing, as
its KV is imported) and their whole length fits the KV pool's free blocks (``max_num_blocks``,
less the running sequences' reservations and the KV held for pickup). Admitted sequences join
the running ones: context sequences are prefilled one by one, generation-only ones start from
their imported first token(s) (emitted again: TensorRT-LLM's generation-only output covers the
whole generation), and then every sequence still running decodes one token in one batched step.
A sequence ends, checked in this order for each token as TensorRT-LLM's TorchSampler does
(``_handle_stop_criteria``, sampler.py, cited at :func:`_accept`): at its end id (not emitted;
finish reason "stop"), at ``max_new_tokens`` ("length"; a context-only request asks for one
token, as TensorRT-LLM forces, and its final emission hands back the prompt's KV) or at a stop
word the prompt and output now end with (emitted; "stop"). So a token that reaches
``max_new_tokens`` and completes a stop word ends "length", with no stop word reported -- a
context-only request's one token included, which then hands back its KV like any other. The
first tokens a generation-only request imports are not checked against the stop words (upstream
appends them without its sampler's checks); its own tokens are, over the whole sequence. A
failed step fails the running sequences; the waiting ones never touched the engine and stay
queued.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

from pdtrt.engine_io import RequestType
from pdtrt.stop_words import completed_stop_word

if TYPE_CHECKING:
    from pdtrt.llmapi.reference.engine import KV, TokenLogprobs

__all__ = ["Delivery", "Emission", "IterationPlan", "Seq", "State", "blocks_reserved", "fail",
           "postprocess", "prefill_cost", "schedule"]


@dataclass(frozen=True, kw_only=True)
class Emission:
    """What one sequence's client gets: new tokens, and on the last one how it ended."""

    tokens: tuple[int, ...]  # tokens new in this emission
    final: bool
    logprobs: tuple[TokenLogprobs, ...] = ()  # of ``tokens``, for a sequence that asked
    stop_word: tuple[int, ...] | None = None  # final: the stop word the output ends with
    kv: KV | None = None  # context-only: the prompt's KV, on the final emission
    error: str | None = None
    cancelled: bool = False
    finish_reason: str | None = None  # final, not failed nor cancelled: "stop" or "length"


@dataclass(kw_only=True, eq=False)
class Seq:
    """One sequence as the policy sees it: the request's limits and its tokens so far.

    Compared by identity (two requests may share an id). ``kv`` belongs to the engine loop; the
    policy only hands it back on a context-only sequence's final emission.
    """

    request_id: str
    prompt: list[int]
    max_new_tokens: int
    end_id: int | None = None
    mode: RequestType = RequestType.CONTEXT_AND_GENERATION
    first_tokens: tuple[int, ...] = ()  # generation-only: the context phase's first token(s)
    first_logprobs: tuple[TokenLogprobs, ...] = ()  # and their log-probabilities (if asked)
    stop_words: tuple[tuple[int, ...], ...] = ()  # an output ending with one ends ("stop")
    kv: KV | None = None
    generated: list[int] = field(default_factory=list)
    cancelled: bool = False  # the client cancelled; set by the loop, acted on by schedule()
    done: bool = False  # its final emission has been made


S = TypeVar("S", bound=Seq)
Delivery = tuple[S, Emission]  # an emission and the sequence whose client gets it


@dataclass(kw_only=True)
class State(Generic[S]):
    """The sequences one engine holds: ``waiting`` in arrival order, ``running`` admitted."""

    max_batch_size: int  # running sequences at most
    max_num_tokens: int  # prompt tokens prefilled per iteration at most (the first always fits)
    # the KV pool: blocks at most (None: unbounded), tokens a block holds, and blocks held
    # outside the running sequences -- finished context-only KV waiting for its pull, which
    # upstream keeps allocated until the transfer or its timeout (TensorRT-LLM PRs #12640,
    # #12816: a stalled transfer fills a context server's pool)
    max_num_blocks: int | None = None
    tokens_per_block: int = 32
    num_held_blocks: int = 0
    waiting: deque[S] = field(default_factory=deque)
    running: list[S] = field(default_factory=list)

    @property
    def num_active(self) -> int:
        return len(self.running) + len(self.waiting)


@dataclass(frozen=True, kw_only=True)
class IterationPlan(Generic[S]):
    """One iteration's work, in the order the loop does it."""

    emissions: tuple[Delivery[S], ...]  # to deliver first: cancellations, imported first tokens
    cancelled: tuple[S, ...]  # dropped from ``waiting`` and ``running``
    imported: tuple[S, ...]  # admitted generation-only: KV imported, first tokens applied
    prefill: tuple[S, ...]  # admitted, to prefill one by one in this order
    decode: tuple[S, ...]  # the batch to decode after the prefills, less those that finished


def prefill_cost(seq: Seq) -> int:
    """Prompt tokens ``seq`` takes from the iteration's ``max_num_tokens``."""
    return 0 if seq.mode is RequestType.GENERATION_ONLY else len(seq.prompt)


def schedule(state: State[S]) -> IterationPlan[S]:
    """Drop the cancelled sequences, admit waiting ones within the limits, plan the decode."""
    cancelled = tuple(s for s in (*state.running, *state.waiting) if s.cancelled)
    state.running = [s for s in state.running if not s.cancelled]
    state.waiting = deque(s for s in state.waiting if not s.cancelled)
    emissions: list[Delivery[S]] = [(s, _finish(s, cancelled=True)) for s in cancelled]
    admitted = _admit(state)
    state.running.extend(admitted)
    imported = tuple(s for s in admitted if s.mode is RequestType.GENERATION_ONLY)
    emissions += [(s, _accept(state, s, s.first_tokens, s.first_logprobs, sampled=False))
                  for s in imported]
    return IterationPlan(emissions=tuple(emissions), cancelled=cancelled, imported=imported,
                prefill=tuple(s for s in admitted if s.mode is not RequestType.GENERATION_ONLY),
                decode=tuple(state.running))


def postprocess(state: State[S], results: Iterable[tuple[S, Sequence[int]]
                                                    | tuple[S, Sequence[int],
                                                            Sequence[TokenLogprobs]]]
                ) -> list[Delivery[S]]:
    """Apply a step's new tokens to each sequence (and their log-probabilities, for a
    sequence that asked); those that end leave ``running``."""
    return [(r[0], _accept(state, r[0], r[1], r[2] if len(r) > 2 else ())) for r in results]


def fail(state: State[S], error: str) -> list[Delivery[S]]:
    """A step failed: every running sequence ends with ``error``; ``waiting`` is untouched."""
    failed, state.running = state.running, []
    return [(s, _finish(s, error=error)) for s in failed]


def blocks_reserved(seq: Seq, tokens_per_block: int) -> int:
    """KV blocks a sequence holds from admission to its end: its whole length, prompt plus
    ``max_new_tokens``, as TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler reserves it."""
    return -(-(len(seq.prompt) + seq.max_new_tokens) // tokens_per_block)


def _admit(state: State[S]) -> list[S]:
    """Arrival order, while the batch, the prefill budget and the KV pool allow; the head of
    the queue waits for blocks (held KV expiring, sequences ending) rather than being passed.
    A sequence alone in an empty pool is admitted whatever it needs, so none waits forever."""
    admitted: list[S] = []
    budget = state.max_num_tokens
    tpb = state.tokens_per_block
    used = state.num_held_blocks + sum(blocks_reserved(s, tpb) for s in state.running)
    while state.waiting and len(state.running) + len(admitted) < state.max_batch_size:
        head = state.waiting[0]
        cost, blocks = prefill_cost(head), blocks_reserved(head, tpb)
        if admitted and cost > budget:
            break
        if state.max_num_blocks is not None and used + blocks > state.max_num_blocks and \
                (used or admitted):
            break
        budget -= cost
        used += blocks
        admitted.append(state.waiting.popleft())
    return admitted


def _accept(state: State[S], seq: S, tokens: Sequence[int],
            token_logprobs: Sequence[TokenLogprobs] = (), *, sampled: bool = True) -> Emission:
    """Append ``tokens`` to the output until one ends it, checked in TensorRT-LLM's order:
    the end id (not part of the output), then ``max_new_tokens``, then a stop word the prompt
    and output now end with (the word stays in the output). ``sampled`` False: tokens a
    generation-only request imports, which no stop word ends.

    The order is TorchSampler's ``_handle_stop_criteria`` (END_ID, then LENGTH, then
    STOP_WORDS; tensorrt_llm/_torch/pyexecutor/sampler.py, NVIDIA/TensorRT-LLM at
    00026bd121addd9ee5650a7da9fee6b57db79a6f; its batched ``_write_finish_reasons`` writes
    stop words, then length, then end id, each overwriting: the same precedence). So the last
    allowed token ends "length" even when it completes a stop word. The generation worker
    appends a context phase's first token with ``add_new_token``
    (``_prepare_disagg_gen_transmission_complete``, tensorrt_llm/_torch/pyexecutor/
    py_executor.py at 9521caf4696c1fb79b0f946f0d980f8f0ebd3e64), outside the sampler's
    checks."""
    new: list[int] = []
    logprobs: list[TokenLogprobs] = []
    reason: str | None = None
    stop_word: tuple[int, ...] | None = None
    for i, token in enumerate(tokens):
        if seq.end_id is not None and token == seq.end_id:
            reason = "stop"
            break
        seq.generated.append(token)
        new.append(token)
        logprobs += token_logprobs[i:i + 1]
        if len(seq.generated) >= seq.max_new_tokens:
            reason = "length"
            break
        if sampled and (stop_word := completed_stop_word(seq.prompt, seq.generated,
                                                         seq.stop_words)) is not None:
            reason = "stop"
            break
    if reason is None:
        return Emission(tokens=tuple(new), logprobs=tuple(logprobs), final=False)
    state.running.remove(seq)
    # context-only: the prompt's KV stays for a decode to pull, unless the end id ended the
    # request (TensorRT-LLM then hands nothing on: the decode is skipped)
    kv = seq.kv if seq.mode is RequestType.CONTEXT_ONLY and reason == "length" else None
    return _finish(seq, tokens=tuple(new), logprobs=tuple(logprobs), kv=kv, reason=reason,
                   stop_word=stop_word)


def _finish(seq: Seq, *, tokens: tuple[int, ...] = (), logprobs: tuple[TokenLogprobs, ...] = (),
            kv: KV | None = None, error: str | None = None, cancelled: bool = False,
            reason: str | None = None, stop_word: tuple[int, ...] | None = None) -> Emission:
    seq.done = True
    return Emission(tokens=tokens, logprobs=logprobs, final=True, kv=kv, error=error,
                    cancelled=cancelled, finish_reason=reason, stop_word=stop_word)
