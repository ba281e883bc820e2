"""What a benchmark sends: the i-th request's prompt text, reproducibly.

Request ``i``'s lengths come from :class:`pdtrt.workload.RequestMix` -- its own generator
seeded with ``(seed, 0, i)``, the same lengths ``pdtrt simulate`` gives request ``i`` for that
seed -- and its prompt text from the same generator, after the lengths. So request ``i`` is the
same in every run with the same seed, whatever the arrival process, the concurrency or the
model (``--compare`` and ``--rates`` send identical requests). With the deployment's tokenizer
(:class:`pdtrt.bench.prompts.TokenizerPrompts`) synthetic prompts are exactly ``isl`` of its
tokens and input tokens are counted with it. Without one, synthetic prompts are ``isl``
whitespace-separated words (``t<k>``, k random) and input tokens are counted as words: exact
for word-level test models, an approximation for a real tokenizer. A trace
(:func:`pdtrt.workload.read_trace`, ``--dataset``) supplies prompts (or prompt lengths) and
output lengths instead, cycled; bench sends them on its own arrival schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdtrt.bench.conversations import Conversation, Turn, conversations, with_history
from pdtrt.bench.prompts import TokenizerPrompts
from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.request_mix import RequestMix, request_rng, word_count
from pdtrt.workload.trace import TraceEntry

__all__ = ["PlannedRequest", "RequestPlan"]


@dataclass(frozen=True, kw_only=True)
class PlannedRequest:
    index: int
    prompt: str
    input_tokens: int
    max_tokens: int
    conversation: str | None = None  # a turn of a multi-turn trace (pdtrt.bench.conversations)
    turn: int | None = None


@dataclass(frozen=True, kw_only=True)
class RequestPlan:
    """What each request of a benchmark is: request ``i``'s prompt and ``max_tokens``
    (:meth:`request`). Not when it is sent -- the run's loop and arrivals are
    :class:`~pdtrt.bench.runner.RunPlan`'s."""

    isl: LengthDist
    osl: LengthDist
    seed: int = 0
    dataset: tuple[TraceEntry, ...] = ()
    vocab_size: int = 1000  # of the synthetic words
    tokenizer: TokenizerPrompts | None = field(default=None, compare=False)

    @property
    def length_unit(self) -> str:
        """What input lengths count: the tokenizer's tokens, or words."""
        return f"tokens ({self.tokenizer.source})" if self.tokenizer else "words"

    @property
    def mix(self) -> RequestMix:
        return RequestMix(isl=self.isl, osl=self.osl, seed=self.seed, trace=self.dataset)

    @property
    def conversations(self) -> tuple[Conversation, ...]:
        """The dataset's conversations; () when it has none."""
        return conversations(self.dataset)

    def count(self, text: str) -> int:
        """Input tokens of ``text``: the tokenizer's, else words."""
        return self.tokenizer.count(text) if self.tokenizer is not None else word_count(text)

    def turn(self, conversation: Conversation, turn: Turn, history: list[str],
             index: int) -> PlannedRequest:
        """Turn ``turn`` of ``conversation`` sent as request ``index``: its own prompt (the
        entry's draw, as :meth:`request` makes it) after the conversation so far."""
        own = self.request(turn.position)
        prompt = with_history(history, own.prompt)
        return PlannedRequest(index=index, prompt=prompt, input_tokens=self.count(prompt),
                              max_tokens=own.max_tokens, conversation=conversation.id,
                              turn=turn.number)

    def request(self, index: int) -> PlannedRequest:
        rng = request_rng(self.seed, index)
        count = self.tokenizer.count if self.tokenizer is not None else word_count
        draw = self.mix.draw(index, rng, count=count)
        if draw.prompt is not None:
            prompt, n = draw.prompt, count(draw.prompt)
        elif self.tokenizer is not None:
            prompt, n = self.tokenizer.make(rng, draw.isl)
        else:
            words = rng.integers(0, self.vocab_size, size=draw.isl)
            prompt, n = " ".join(f"t{w}" for w in words), draw.isl
        return PlannedRequest(index=index, prompt=prompt, input_tokens=n, max_tokens=draw.osl)
