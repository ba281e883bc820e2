"""The reference ``SamplingParams`` and ``DisaggregatedParams``: pinned fields, upstream rules.

Both are keyword-only dataclasses like TensorRT-LLM's (``tensorrt_llm/sampling_params.py`` at
000a01de66f0eab4ab05640711f0253f50f5209c, ``tensorrt_llm/disaggregated_params.py`` at
01009a33a704c61e2c183c40514d7fb59159ab09) but carry only the fields pdtrt's engine model sets
(``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``; the contract test keeps the two equal). What
decides behaviour is upstream's: ``pad_id`` defaults to ``end_id``; greedy decoding is top_k
None/1 with top_p None/0 (``_greedy_decoding``); None means the runtime's default (top_k 0,
top_p 0, seed 0, temperature 1.0, min_tokens 1); ``request_type`` is lower-cased and must be one
of the three values, else ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.engine_io import RequestType

__all__ = ["DisaggregatedParams", "SamplingParams"]


@dataclass(slots=True, kw_only=True)
class SamplingParams:
    end_id: int | None = None
    pad_id: int | None = None
    max_tokens: int = 32
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    temperature: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    length_penalty: float | None = None

    def __post_init__(self) -> None:
        if self.pad_id is None:
            self.pad_id = self.end_id

    @property
    def _greedy_decoding(self) -> bool:
        return self.top_k in (None, 1) and self.top_p in (None, 0.0)  # no beam search here


@dataclass(slots=True, kw_only=True)
class DisaggregatedParams:
    request_type: str | None = None
    first_gen_tokens: list[int] | None = None
    ctx_request_id: int | None = None
    opaque_state: bytes | None = None
    draft_tokens: list[int] | None = None

    def __post_init__(self) -> None:
        if self.request_type is not None:
            self.request_type = self.request_type.lower()
            if self.request_type not in tuple(RequestType):
                raise ValueError(f"Unknown request type: {self.request_type}. Must be "
                                 "context_only, generation_only or context_and_generation")
