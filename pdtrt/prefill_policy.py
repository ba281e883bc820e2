"""Where one request's prefill runs: conditional disaggregation (issue 27, item 3).

Decided per request, at its arrival, from what the router knows then -- no Triton, no clock:

- **aggregated**: the prompt is shorter than ``aggregated_below_tokens`` and the router has an
  aggregated pool (pdtrt's static short-prompt path, unchanged).
- **local**: a decode endpoint prefills the request itself -- one ``context_and_generation``
  request to it, no prefill call and no KV transfer -- when its *net-new* prompt (the prompt
  minus the prefix that decode endpoint's KV blocks already hold, per the router's KV index;
  the whole prompt when its engines keep no blocks) is at most ``max_local_prefill_tokens``
  (reason ``short_net_new``),
  or when the prefill pool is queued: even the least loaded healthy prefill endpoint has at
  least ``max_prefill_queue_depth`` calls in flight per instance (reason ``prefill_queued``).
  Either way only a prompt the decode engine takes in one step (``local_prefill_limit``: its
  ``max_num_tokens``).
- **remote**: otherwise -- a prefill endpoint, then a decode endpoint (reason
  ``long_net_new``).

The rule is Dynamo's (``DisaggregatedRouter``: remote iff the prefill length minus the prefix
hit exceeds ``max_local_prefill_length`` and the prefill queue is not too deep). TensorRT-LLM's
``trtllm-serve`` disaggregated server (``ConditionalDisaggConfig.max_local_prefill_length``,
``tensorrt_llm/serve/openai_disagg_server.py``) also prefills remotely whenever its KV-aware
router found *no* prefix match; pdtrt does not: a short net-new prompt is cheap to prefill
where it will be decoded, match or not. The prompt itself must still fit the decode engine's
one step (``local_prefill_limit``), cached or not: a block evicted between the choice and the
request would otherwise leave the engine a prompt it cannot take. Both off (0) is the default
path: every request not aggregated is prefilled remotely.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["PATH_REASONS", "PrefillPath", "PrefillPolicy", "Reason", "choose_path"]


class PrefillPath(StrEnum):
    AGGREGATED = "aggregated"  # the aggregated pool runs both phases
    LOCAL = "local"  # a decode endpoint prefills it itself
    REMOTE = "remote"  # a prefill endpoint, then a decode endpoint


class Reason(StrEnum):
    BELOW_AGGREGATED = "below_aggregated_threshold"
    SHORT_NET_NEW = "short_net_new"
    PREFILL_QUEUED = "prefill_queued"
    LONG_NET_NEW = "long_net_new"


# every (path, reason) a decision can be: the router's labelled counter has one series each
PATH_REASONS = ((PrefillPath.AGGREGATED, Reason.BELOW_AGGREGATED),
                (PrefillPath.LOCAL, Reason.SHORT_NET_NEW),
                (PrefillPath.LOCAL, Reason.PREFILL_QUEUED),
                (PrefillPath.REMOTE, Reason.LONG_NET_NEW))


@dataclass(frozen=True, kw_only=True)
class PrefillPolicy:
    aggregated_below: int = 0  # prompts shorter than this take the aggregated path; 0: never
    max_local_prefill: int = 0  # net-new prompts up to this are prefilled locally; 0: never
    max_prefill_queue_depth: float = 0.0  # calls per prefill instance; 0: never local for it
    local_prefill_limit: int = 0  # the decode engine's max_num_tokens; 0: no local prefill


def choose_path(policy: PrefillPolicy, *, prompt_tokens: int, cached_tokens: int = 0,
                has_aggregated: bool,
                prefill_queue_depth: float | None) -> tuple[PrefillPath, Reason]:
    """The path of one request of ``prompt_tokens`` whose first ``cached_tokens`` the decode
    side holds, given the calls in flight per instance at the least loaded healthy prefill
    endpoint (None: no healthy prefill endpoint)."""
    p = policy
    if has_aggregated and prompt_tokens < p.aggregated_below:
        return PrefillPath.AGGREGATED, Reason.BELOW_AGGREGATED
    fits = 0 < prompt_tokens <= p.local_prefill_limit
    if fits and prompt_tokens - cached_tokens <= p.max_local_prefill:
        return PrefillPath.LOCAL, Reason.SHORT_NET_NEW
    if (fits and p.max_prefill_queue_depth > 0 and prefill_queue_depth is not None
            and prefill_queue_depth >= p.max_prefill_queue_depth):
        return PrefillPath.LOCAL, Reason.PREFILL_QUEUED
    return PrefillPath.REMOTE, Reason.LONG_NET_NEW
