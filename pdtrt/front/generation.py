"""One OpenAI request's generation: engine steps -> text deltas, finish reason, usage.

:func:`run` drives :meth:`~pdtrt.front.engine_client.EngineClient.generate` and yields
:class:`Delta` s -- the text safe to send (detokenized, stop strings held back and cut), the
step's tokens and log-probs -- and records the outcome in a :class:`Outcome`:
``finish_reason`` is ``"stop"`` for a stop string or the end id (the engine ended before
``max_tokens``) and ``"length"`` when ``max_tokens`` tokens came. A stop string ends the
iteration early, which stops the request on the server (the engine's stream is drained in the
background). A stream silent for ``stall_s`` fails with 504 and is stopped likewise.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pdtrt.engine_io import TopLogProbs
from pdtrt.errors import ApiError
from pdtrt.front.engine_client import EngineClient, StreamedTokens
from pdtrt.front.text import Detokenizer, FrontTokenizer, StopStrings

__all__ = ["Delta", "Outcome", "run"]


@dataclass(frozen=True)
class Delta:
    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    top: list[TopLogProbs] | None = None  # the tokens' alternatives, when asked


@dataclass
class Outcome:
    num_prompt: int = 0
    num_completion: int = 0
    finish_reason: str | None = None
    text: list[str] = field(default_factory=list)
    timing: dict[str, Any] | None = None  # the router's, when the request asked for it

    @property
    def usage(self) -> dict[str, int]:
        return {"prompt_tokens": self.num_prompt, "completion_tokens": self.num_completion,
                "total_tokens": self.num_prompt + self.num_completion}


async def _steps_within(steps: AsyncIterator[StreamedTokens],
                        stall_s: float) -> AsyncIterator[StreamedTokens]:
    while True:
        try:
            step = await asyncio.wait_for(anext(steps), stall_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise ApiError(f"the deployment sent nothing for {stall_s:g} s; the request was "
                           "stopped", status=504, type="timeout") from None
        yield step


async def run(engine: EngineClient, tokenizer: FrontTokenizer, *, request_id: str,
              inputs: dict[str, np.ndarray], max_tokens: int, stops: tuple[str, ...],
              logprobs: bool, outcome: Outcome, stall_s: float,
              traceparent: str | None = None) -> AsyncIterator[Delta]:
    detok = Detokenizer(tokenizer)
    held = StopStrings(stops)
    steps = engine.generate(request_id, inputs, logprobs=logprobs, traceparent=traceparent)
    async with aclosing(steps), aclosing(_steps_within(steps, stall_s)) as timed:
        async for step in timed:
            if step.timing is not None:
                outcome.timing = step.timing
            if not step.token_ids:
                continue
            outcome.num_completion += len(step.token_ids)
            text = held.add(detok.add(step.token_ids))
            outcome.text.append(text)
            yield Delta(text, step.token_ids, step.logprobs, step.top)
            if held.hit:
                outcome.finish_reason = "stop"
                return
    rest = held.add(detok.flush())
    rest += held.flush()
    outcome.finish_reason = ("stop" if held.hit or outcome.num_completion < max_tokens
                             else "length")
    if rest:
        outcome.text.append(rest)
        yield Delta(rest, [], None)
