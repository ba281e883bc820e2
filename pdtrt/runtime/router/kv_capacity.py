"""How full each endpoint's KV cache is, as the router knows it: ``kv_capacity`` routing (issue
47, item 4).

A decode pool may mix GPU types -- an L40S (48 GB) beside an H100 (80 GB) holds far fewer KV
blocks -- and least-load routing, which spreads outstanding *tokens* evenly, fills the small
card first: it queues while the large one has room. With ``kv_capacity`` routing the router
reads every endpoint's KV capacity (the engine model's answer to the
:data:`~pdtrt.engine_io.KV_CAPACITY_CURSOR` request: the LLM API's ``kvCacheStats``, blocks per
instance) every ``kv_events_interval_s`` and sends each call where the **fraction** of KV blocks
in use after it would be least, so a 48 GB card and an 80 GB card fill in proportion.

"In use" is the larger of what the engine last reported and what the router has already sent it
and not seen end: each call in flight reserves its whole length (prompt + ``max_new_tokens``,
as TensorRT-LLM's scheduler admits it), which the stats show only as the tokens grow, and not
at all before the next poll. The larger of the two is counted, not the sum, since the engine's
count already includes this router's calls. An endpoint whose blocks after the request would
exceed its capacity costs more than 1, so it gets the request only when no endpoint can hold
it. An endpoint that has not reported yet (TensorRT-LLM has no stats before its first request)
costs 0: it is tried, and reports. Stats come from whichever instance answers; an endpoint of
several instances counts that instance's blocks times the instances.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from pdtrt.client.streams import StreamClient
from pdtrt.engine_io import KV_CAPACITY_CURSOR
from pdtrt.runtime.router.kv_index import ask

__all__ = ["KvCapacity", "poll_capacity"]


@dataclass
class KvCapacity:
    """One endpoint's KV blocks as its engine last reported them (per instance)."""

    max_blocks: int = 0  # 0: not reported yet
    used_blocks: int = 0
    tokens_per_block: int = 0

    @property
    def known(self) -> bool:
        return self.max_blocks > 0 and self.tokens_per_block > 0

    def apply(self, answer: str) -> None:
        """Read one engine answer (JSON; ``{}``: no stats yet, nothing changes). Raises
        :class:`ValueError` for one that does not read, leaving the capacity as it was."""
        try:
            doc = json.loads(answer)
            if not doc:
                return
            values = (int(doc["max_blocks"]), int(doc["used_blocks"]),
                      int(doc["tokens_per_block"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"a KV-capacity answer that does not read: {exc}") from None
        self.max_blocks, self.used_blocks, self.tokens_per_block = values

    def clear(self) -> None:
        """The endpoint was ejected: its engine may come back another size."""
        self.max_blocks = self.used_blocks = self.tokens_per_block = 0

    def used_fraction(self, *, instances: int, reserved_tokens: int, need_tokens: int) -> float:
        """The fraction of the endpoint's blocks in use once a call of ``need_tokens`` is
        added to the ``reserved_tokens`` of the calls in flight there (0 when unknown; over 1
        when it does not fit)."""
        if not self.known:
            return 0.0
        tpb = self.tokens_per_block
        used = max(self.used_blocks * instances, math.ceil(reserved_tokens / tpb))
        return (used + math.ceil(need_tokens / tpb)) / (self.max_blocks * instances)


async def poll_capacity(client: StreamClient, model: str, capacity: KvCapacity, *,
                        error_output: str = "") -> str | None:
    """Ask ``model`` for its KV capacity and apply the answer: None when it did, else what went
    wrong (the capacity is left as it was)."""
    answer, problem = await ask(client, model, KV_CAPACITY_CURSOR, error_output=error_output)
    if answer is None:
        return problem
    try:
        capacity.apply(answer)
    except ValueError as exc:
        return str(exc)
    return None
