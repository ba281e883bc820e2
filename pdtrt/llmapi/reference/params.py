"""The reference ``SamplingParams`` and ``DisaggregatedParams``: pinned fields, upstream rules.

Both are keyword-only dataclasses like TensorRT-LLM's (``tensorrt_llm/sampling_params.py`` at
000a01de66f0eab4ab05640711f0253f50f5209c, ``tensorrt_llm/disaggregated_params.py`` at
01009a33a704c61e2c183c40514d7fb59159ab09); ``SamplingParams`` carries the fields pdtrt's engine
model sets, ``DisaggregatedParams`` all of upstream's
(``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``; the contract test keeps each equal to it). What
decides behaviour is upstream's: ``pad_id`` defaults to ``end_id``; greedy decoding is top_k None/1
with top_p None/0 (``_greedy_decoding``); None means the runtime's default (top_k 0, top_p 0, seed
0, temperature 1.0, min_tokens 1); ``logprobs`` True means 1; word lists come from
``stop_token_ids`` / ``bad_token_ids`` plus the tokenizer-encoded ``_stop_word_ids`` /
``_bad_word_ids``, and a ``stop`` / ``bad`` string never encoded is a ``RuntimeError``;
``request_type`` is lower-cased and must be one of the three values, else ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from pdtrt.engine_io import RequestType

__all__ = ["DisaggScheduleStyle", "DisaggregatedParams", "SamplingParams"]


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    bad: str | list[str] | None = None
    bad_token_ids: list[int] | None = None
    _bad_word_ids: list[list[int]] | None = field(default=None, init=False, repr=False)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    _stop_word_ids: list[list[int]] | None = field(default=None, init=False, repr=False)
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id
        self.logprobs = self.logprobs and int(self.logprobs)  # upstream: True -> 1

    @property
    def _greedy_decoding(self) -> bool:
        return self.top_k in (None, 1) and self.top_p in (None, 0.0)  # no beam search here

    # Upstream's word lists: ``stop_token_ids`` / ``bad_token_ids`` are one-token words; the
    # strings ``stop`` / ``bad`` become ``_stop_word_ids`` / ``_bad_word_ids`` in ``_setup``
    # (tokenizer), which ``generate_async`` calls only when ``end_id`` is None. Without a
    # tokenizer a caller sets the ids itself, after construction, with ``stop`` / ``bad`` naming
    # them; a string never encoded is an error, as upstream.
    def _get_stop_words(self) -> list[list[int]]:
        return _words(self.stop_token_ids, self.stop, self._stop_word_ids, "stop")

    def _get_bad_words(self) -> list[list[int]]:
        return _words(self.bad_token_ids, self.bad, self._bad_word_ids, "bad")

    def _get_stop_reasons_and_words(self) -> list[tuple[int | str, list[int]]]:
        reasons: list[int | str] = list(self.stop_token_ids or ())
        if self.stop is not None:
            reasons += [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return list(zip(reasons, self._get_stop_words(), strict=False))


def _words(token_ids: list[int] | None, strings: str | list[str] | None,
           encoded: list[list[int]] | None, name: str) -> list[list[int]]:
    words = [[int(t)] for t in token_ids or ()]
    if strings is None:
        return words
    if encoded is None:
        raise RuntimeError(f"SamplingParams.{name} ({strings}) is not processed by tokenizer, "
                           "please call the setup method.")
    return words + [list(w) for w in encoded]


class DisaggScheduleStyle(IntEnum):
    CONTEXT_FIRST = 0
    GENERATION_FIRST = 1


@dataclass(slots=True, kw_only=True)
class DisaggregatedParams:
    """Every field of upstream's; the reference reads ``request_type``, ``first_gen_tokens``,
    ``ctx_request_id`` and ``opaque_state``, and refuses what it cannot honour
    (:meth:`_unsupported`) instead of ignoring it."""

    request_type: str | None = None
    first_gen_tokens: list[int] | None = None
    first_gen_log_probs: list[Any] | None = None
    first_gen_logits: list[Any] | None = None
    ctx_request_id: int | None = None
    opaque_state: bytes | None = None
    draft_tokens: list[int] | None = None
    disagg_request_id: int | None = None
    ctx_dp_rank: int | None = None
    ctx_info_endpoint: str | None = None
    schedule_style: DisaggScheduleStyle | None = None
    multimodal_embedding_handles: list[dict[str, Any]] | None = None
    multimodal_hashes: list[list[int]] | None = None
    mrope_position_ids_handle: dict[str, Any] | None = None
    mrope_position_deltas_handle: dict[str, Any] | None = None

    def _unsupported(self) -> list[str]:
        """The fields set that the reference does not implement (no draft model, no attention
        DP, no multimodal input, context first only)."""
        unsupported = ("first_gen_logits", "draft_tokens", "ctx_dp_rank", "ctx_info_endpoint",
                       "multimodal_embedding_handles", "multimodal_hashes",
                       "mrope_position_ids_handle", "mrope_position_deltas_handle")
        named = [n for n in unsupported if getattr(self, n) is not None]
        if self.schedule_style not in (None, DisaggScheduleStyle.CONTEXT_FIRST):
            named.append("schedule_style")
        return named

    def __post_init__(self) -> None:
        if self.request_type is not None:
            self.request_type = self.request_type.lower()
            if self.request_type not in tuple(RequestType):
                raise ValueError(f"Unknown request type: {self.request_type}. Must be "
                                 "context_only, generation_only or context_and_generation")
