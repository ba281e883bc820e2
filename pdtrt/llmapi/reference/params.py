"""The reference ``SamplingParams`` and ``DisaggregatedParams``: TensorRT-LLM 1.2's fields, rules.

Both are keyword-only dataclasses like upstream's, with the fields of the 1.2 line
(``pdtrt/data/targets/trtllm-1.2-llmapi.yaml`` names each source commit and how sure the
reading is; the contract test keeps these classes equal to it):

- ``SamplingParams``: every field of ``tensorrt_llm/sampling_params.py`` at
  a98a9061d72f6fd39f5d055ebdd2c6878a100e2c (late-2025 main, before the 1.2 cut), with upstream's
  defaults. The reference implements the ones pdtrt's engine model sets; any other field set to
  a non-default value is refused by the reference ``LLM`` (:meth:`SamplingParams._unimplemented`),
  never ignored. Upstream's rules: ``pad_id`` defaults to ``end_id``, ``best_of`` to ``n``;
  ``logprobs`` True means 1; 1.2's greedy rule (``params_imply_greedy_decoding``): all of
  temperature / top_p / top_k unset, or top_k 1, or top_p 0, or temperature 0 (1.0 ignored
  temperature); word lists come from ``stop_token_ids`` / ``bad_token_ids`` plus the
  tokenizer-encoded ``_stop_word_ids`` / ``_bad_word_ids``, and a ``stop`` / ``bad`` string
  never encoded is a ``RuntimeError``.
- ``DisaggregatedParams``: the fields of ``tensorrt_llm/disaggregated_params.py`` as release/1.2
  was cut (NVIDIA/TensorRT-LLM at b828daced8dcf69000b172b183b5ff45e5a158d1): no
  ``first_gen_log_probs`` / ``first_gen_logits`` (main PR #11727 and #11767; whether their
  cherry-picks #11792 / #11832 reached 1.2.1 is not visible from here), none of the 1.3 line's
  ``disagg_request_id``, ``ctx_dp_rank``, ``ctx_info_endpoint``, ``schedule_style``. The twin
  takes the narrower class on purpose: it must never accept a keyword 1.2.1 might refuse, and
  pdtrt's engine model passes such fields only where the installed class has them
  (:mod:`pdtrt.llmapi.check`). ``request_type`` is lower-cased and must be one of the three
  values, else ``ValueError``.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from pdtrt.engine_io import RequestType

__all__ = ["DisaggregatedParams", "SamplingParams", "unsupported"]


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
    embedding_bias: Any = None
    logits_processor: Any = None
    apply_batched_logits_processor: bool = False
    n: int = 1
    best_of: int | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    top_p: float | None = None
    top_p_min: float | None = None
    top_p_reset_ids: int | None = None
    top_p_decay: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    beam_search_diversity_rate: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None
    early_stopping: int | None = None
    no_repeat_ngram_size: int | None = None
    min_p: float | None = None
    beam_width_array: list[int] | None = None
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    return_context_logits: bool = False
    return_generation_logits: bool = False
    exclude_input_from_output: bool = True
    return_encoder_output: bool = False
    return_perf_metrics: bool = False
    additional_model_outputs: list[str] | None = None
    lookahead_config: Any = None
    guided_decoding: Any = None
    ignore_eos: bool = False
    detokenize: bool = True
    add_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id
        if self.best_of is None:
            self.best_of = self.n
        self.logprobs = self.logprobs and int(self.logprobs)  # upstream: True -> 1

    @staticmethod
    def params_imply_greedy_decoding(*, temperature: float | None, top_p: float | None,
                                     top_k: int | None) -> bool:
        """1.2's rule: nothing set, or any one knob that leaves a single candidate."""
        return (temperature is None and top_p is None and top_k is None) or top_k == 1 \
            or top_p == 0.0 or temperature == 0

    @property
    def _greedy_decoding(self) -> bool:
        return not self.use_beam_search and self.params_imply_greedy_decoding(
            temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)

    def _unimplemented(self) -> list[str]:
        """The fields set to something the reference does not do (beam search, several
        returns, logits hooks and outputs, guided decoding, ...), as ``name (value)``."""
        return [f"{f.name} ({getattr(self, f.name)!r})" for f in fields(self)
                if f.init and f.name not in _IMPLEMENTED
                and getattr(self, f.name) != _default(f)]

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


# The SamplingParams fields the reference LLM acts on, and those it need not: the tokenizer-side
# ones (it takes and returns token ids) and best_of (n's, unless set: n > 1 is refused)
_IMPLEMENTED = frozenset({
    "end_id", "pad_id", "max_tokens", "bad", "bad_token_ids", "stop", "stop_token_ids",
    "include_stop_str_in_output", "best_of", "top_k", "top_p", "seed", "temperature",
    "min_tokens", "repetition_penalty", "presence_penalty", "frequency_penalty", "logprobs",
    "return_perf_metrics",
    "detokenize", "add_special_tokens", "skip_special_tokens", "spaces_between_special_tokens",
    "exclude_input_from_output"})


def _default(f: Field[Any]) -> Any:
    return f.default_factory() if f.default is MISSING and f.default_factory is not MISSING \
        else f.default


@dataclass(slots=True, kw_only=True)
class DisaggregatedParams:
    """The fields of release/1.2's class; the reference reads ``request_type``,
    ``first_gen_tokens``, ``ctx_request_id`` and ``opaque_state``, and refuses what it cannot
    honour (:func:`unsupported`) instead of ignoring it."""

    request_type: str | None = None
    first_gen_tokens: list[int] | None = None
    ctx_request_id: int | None = None
    opaque_state: bytes | None = None
    draft_tokens: list[int] | None = None
    multimodal_embedding_handles: list[dict[str, Any]] | None = None
    multimodal_hashes: list[list[int]] | None = None

    def __post_init__(self) -> None:
        if self.request_type is not None:
            self.request_type = self.request_type.lower()
            if self.request_type not in tuple(RequestType):
                raise ValueError(f"Unknown request type: {self.request_type}. Must be "
                                 "context_only, generation_only or context_and_generation")


def unsupported(params: Any) -> list[str]:
    """The fields set on ``params`` (this class, or a newer release's passed in tests) that
    the reference does not implement: no draft model, no attention DP, no multimodal input,
    context first only, no logits hand-over."""
    named = [n for n in ("first_gen_logits", "draft_tokens", "ctx_dp_rank", "ctx_info_endpoint",
                         "multimodal_embedding_handles", "multimodal_hashes",
                         "mrope_position_ids_handle", "mrope_position_deltas_handle")
             if getattr(params, n, None) is not None]
    if getattr(params, "schedule_style", None) not in (None, 0):  # 0: context first
        named.append("schedule_style")
    return named
