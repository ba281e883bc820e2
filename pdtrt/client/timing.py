"""The server's own account of one request's time to first token, as the client reads it.

pdtrt's router answers a request that sets the input ``return_timing`` with the output
``pdtrt_timing`` on its final response: a JSON object on the router's clock (milliseconds;
:mod:`pdtrt.runtime.router.timing` defines every field). :class:`ServerTiming` is its typed
form on the client side: the server's TTFT and the five phases that *partition* it, in the order
a request passes them (:data:`TTFT_PHASE_FIELDS`). With ``early_first_token`` on (the default)
the first token leaves after the prefill, so the three decode phases are 0 here: this is the
view whose five parts sum to the TTFT, not the full duration of every phase (the router's
``phases_ms``, which this client does not keep).

A model without the input (NVIDIA's ensembles, pdtrt's aggregated ones) is never asked; the
client then has no timing for the request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pdtrt.engine_io import TIMING_OUTPUT
from pdtrt.errors import RequestError

__all__ = ["TTFT_PHASE_FIELDS", "ServerTiming"]

TTFT_PHASE_FIELDS = ("queue_ms", "prefill_ms", "decode_queue_ms", "kv_transfer_ms",
                     "first_decode_ms")
"""The five phases that sum to the server's TTFT, in the order a request passes them."""


@dataclass(frozen=True, kw_only=True)
class ServerTiming:
    """One request's server-side TTFT (``ttft_ms``, the router's arrival -> first token out)
    and its partition into the five phases of :data:`TTFT_PHASE_FIELDS`; milliseconds."""

    ttft_ms: float
    queue_ms: float
    prefill_ms: float
    decode_queue_ms: float
    kv_transfer_ms: float
    first_decode_ms: float
    path: str = ""  # the router's path ("disaggregated", "aggregated", "local", ...)

    @property
    def phases_ms(self) -> dict[str, float]:
        """The five phases by field name, in request order."""
        return {name: getattr(self, name) for name in TTFT_PHASE_FIELDS}

    @classmethod
    def parse(cls, text: str) -> ServerTiming:
        """The timing in the router's JSON ``text``. Raises :class:`RequestError` for text that
        is not a JSON object with a number in ``ttft_ms`` and in every phase field."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RequestError(f"the server's {TIMING_OUTPUT} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise RequestError(f"the server's {TIMING_OUTPUT} is not a JSON object: {text!r}")
        values: dict[str, float] = {}
        for name in ("ttft_ms", *TTFT_PHASE_FIELDS):
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise RequestError(f"the server's {TIMING_OUTPUT} has no number in {name!r}: "
                                   f"{value!r}")
            values[name] = float(value)
        return cls(**values, path=str(data.get("path") or ""))
