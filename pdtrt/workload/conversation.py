"""The shape of a chat workload: a shared system prompt, turns per conversation, think time.

Turn ``k`` of a conversation sends the conversation so far -- turn 0's ``isl`` tokens (the
first ``shared_prefix`` of them the same for every conversation), then each earlier turn's
answer (``osl``) and new tokens (``followup_isl``, default ``isl``) -- ``think_s`` after turn
``k - 1``'s last token. ``turns = 1`` and ``shared_prefix = 0`` is the single-request workload:
nothing for block reuse to find.

What an engine with block reuse (TensorRT-LLM's ``kv_cache_config.enable_block_reuse``) still
has to compute of a turn, when the request lands where its prefix is (KV-aware routing) and
nothing was evicted: the prompt less the whole blocks it holds -- the shared prefix for turn 0,
the previous turn's prompt for a later turn (a prefill engine never saw the previous answer, so
the answer is computed again; at most ``prompt - 1`` tokens are ever reused, as TensorRT-LLM
always computes the last prompt token). :meth:`ConversationShape.mean_computed_tokens` is that
*ideal* figure; the simulator (:mod:`pdtrt.sim`) measures the real one, with the routing's
choices. The planner sizes prefill pools by the ideal figure and engines by
:attr:`ConversationShape.longest_prompt`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.errors import WorkloadError

__all__ = ["ConversationShape"]


def _whole_blocks(tokens: int, block: int) -> int:
    return tokens // block * block


@dataclass(frozen=True, kw_only=True)
class ConversationShape:
    isl: int  # turn 0's prompt, the shared prefix included
    osl: int  # every turn's answer
    shared_prefix: int = 0
    turns: int = 1
    think_s: float = 0.0
    followup_isl: int | None = None  # new tokens of turns > 0 (None: ``isl``)

    def __post_init__(self) -> None:
        if self.isl < 1 or self.osl < 1:
            raise WorkloadError(f"prompt and answer need at least one token (isl {self.isl}, "
                                f"osl {self.osl})")
        if not 0 <= self.shared_prefix <= self.isl:
            raise WorkloadError(
                f"shared prefix {self.shared_prefix} is not within the first turn's prompt of "
                f"{self.isl} tokens", hint="the system prompt is part of the first prompt: "
                "give a shared prefix of at most the prompt length")
        if self.turns < 1:
            raise WorkloadError(f"turns per conversation must be at least 1, not {self.turns}")
        if not math.isfinite(self.think_s) or self.think_s < 0:
            raise WorkloadError(f"think time must be a finite number >= 0 s, not "
                                f"{self.think_s}")
        if self.turns == 1 and (self.think_s > 0 or self.followup_isl is not None):
            raise WorkloadError("think time and follow-up lengths need conversations of more "
                                "than one turn", hint="pass --turns N with N > 1")
        if self.followup_isl is not None and self.followup_isl < 1:
            raise WorkloadError(f"follow-up prompts need at least one token, not "
                                f"{self.followup_isl}")

    @property
    def new_tokens(self) -> int:
        """New prompt tokens of a turn after the first."""
        return self.isl if self.followup_isl is None else self.followup_isl

    @property
    def reuses(self) -> bool:
        """Whether block reuse has anything to find (a shared prefix or a later turn)."""
        return self.shared_prefix > 0 or self.turns > 1

    def prompt(self, turn: int) -> int:
        """Whole prompt of turn ``turn`` (0-based): the conversation so far."""
        return self.isl + turn * (self.osl + self.new_tokens)

    @property
    def longest_prompt(self) -> int:
        return self.prompt(self.turns - 1)

    @property
    def mean_prompt(self) -> float:
        return sum(self.prompt(k) for k in range(self.turns)) / self.turns

    def computed_tokens(self, turn: int, *, block: int) -> int:
        """Prompt tokens an engine with block reuse computes for turn ``turn`` when it holds
        the turn's reusable prefix (whole ``block``-token blocks; see module doc)."""
        prompt = self.prompt(turn)
        held = self.shared_prefix if turn == 0 else self.prompt(turn - 1)
        return prompt - _whole_blocks(min(held, prompt - 1), block)

    def mean_computed_tokens(self, *, block: int) -> float:
        """Mean of :meth:`computed_tokens` over a conversation's turns."""
        return sum(self.computed_tokens(k, block=block) for k in range(self.turns)) / self.turns
