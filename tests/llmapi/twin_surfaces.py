"""Twin variants of TensorRT-LLM's LLM-API surface, for tests that must see a version difference.

The reference's ``DisaggregatedParams`` is release/1.2's class as it was cut (pinned narrow on
purpose: pdtrt.llmapi.reference.params). Upstream moved on: the cherry-picks #11792 / #11832
(February / March 2026, branch not visible) add ``first_gen_log_probs`` and
``first_gen_logits``; the 1.3 line's main adds ``disagg_request_id``, ``ctx_dp_rank``,
``ctx_info_endpoint``, ``schedule_style`` and the mrope handles
(tensorrt_llm/disaggregated_params.py at 01009a33a704c61e2c183c40514d7fb59159ab09). These
classes are those shapes, and :func:`without` one with a field gone, so the engine model's
surface check and the fields it passes are tested against each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pdtrt.llmapi import LLMApi, LLMApiImpl, load_llm_api
from pdtrt.llmapi.reference.params import DisaggregatedParams


@dataclasses.dataclass(slots=True, kw_only=True)
class DisaggregatedParamsWithLogprobs(DisaggregatedParams):
    """release/1.2 plus the cherry-picks of #11727 and #11767 (the first token's log-probs and
    logits) -- what 1.2.1 holds if #11792 / #11832 went to release/1.2."""

    first_gen_log_probs: list[Any] | None = None
    first_gen_logits: list[Any] | None = None


@dataclasses.dataclass(slots=True, kw_only=True)
class DisaggregatedParams13(DisaggregatedParamsWithLogprobs):
    """The 1.3 line's main (at 01009a33a704c61e2c183c40514d7fb59159ab09)."""

    disagg_request_id: int | None = None
    ctx_dp_rank: int | None = None
    ctx_info_endpoint: str | None = None
    schedule_style: int | None = None  # DisaggScheduleStyle: CONTEXT_FIRST 0, GENERATION_FIRST 1
    mrope_position_ids_handle: dict[str, Any] | None = None
    mrope_position_deltas_handle: dict[str, Any] | None = None


def without(cls: type, name: str) -> type:
    """A keyword-only dataclass like ``cls`` whose constructor lacks field ``name``."""
    kept = [(f.name, f.type, dataclasses.field(default=f.default))
            for f in dataclasses.fields(cls) if f.name != name]
    return dataclasses.make_dataclass(f"{cls.__name__}Without_{name}", kept, slots=True,
                                      kw_only=True)


def reference_api(**classes: Any) -> LLMApi:
    """The reference LLM API with some of its classes replaced (``DisaggregatedParams=...``)."""
    return dataclasses.replace(load_llm_api(LLMApiImpl.REFERENCE), **classes)
