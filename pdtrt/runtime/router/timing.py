"""One request's timing, returned to a client that asks: where its time to first token went.

A client that sets the router's input ``return_timing`` (:data:`~pdtrt.engine_io.TIMING_INPUT`)
gets, on the router's final response, the output ``pdtrt_timing``
(:data:`~pdtrt.engine_io.TIMING_OUTPUT`): a JSON object made by :func:`request_timing` from the
request's :class:`~pdtrt.runtime.router.timeline.Timeline` just before that response goes out.
All times are milliseconds on the router's clock.

``ttft_ms`` is the server's time to first token: the request's arrival at the router -> its
first token sent to the client. The five phase fields *partition* it -- they sum to
``ttft_ms`` exactly (up to the rounding to microseconds):

=====================  ==========================================================================
``queue_ms``           arrival -> the first phase call sent (the router's endpoint choice)
``prefill_ms``         the first phase call -> the decode call sent: the prefill's queue and
                       compute at its endpoint, retries included; with ``early_first_token`` the
                       first token goes out here, so the time ends at it. On the aggregated and
                       local paths, the engine's whole time to the first token
``decode_queue_ms``    the decode engine's own queue time (its ``arrival_time_ns`` ->
                       ``first_scheduled_time_ns``)
``kv_transfer_ms``     the rest of the decode call sent -> the decode's first response: the KV
                       pull and the hand-over
``first_decode_ms``    the decode's first response -> the first token out
=====================  ==========================================================================

A phase that ran after the first token went out (with ``early_first_token`` the whole decode)
counts 0 there; ``phases_ms`` has every phase that ran in full, wherever it fell: ``queue``,
``prefill`` (the last prefill attempt's call -> answer), ``decode_queue``, ``kv_transfer``,
``first_decode`` (the decode's first response -> its next one: its first own step) and
``decode`` (its first response -> its last); a phase that did not run is absent.

The reference engine's ``generate_async`` returns before a generation-only request's KV pull
(the pull runs on a thread, then the scheduler admits the request), so its ``decode_queue_ms``
is the engine model's hand-over only and the wait for a batch slot counts in
``kv_transfer_ms``: the engine does not report the two apart. Neither engine reports the bytes
of one request's KV transfer (the decode engine's ``pdtrt_kv_transfer_bytes_total`` counts
them over all requests), so the timing has no bytes.
"""

from __future__ import annotations

import json
from typing import Any

from pdtrt.runtime.router.timeline import Timeline

__all__ = ["TTFT_PHASES", "request_timing", "timing_json", "ttft_phases", "whole_phases"]

# the phases that partition the time to first token, in the order a request passes them
TTFT_PHASES = ("queue", "prefill", "decode_queue", "kv_transfer", "first_decode")


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _starts(t: Timeline) -> list[tuple[str, float | None]]:
    """When each phase of :data:`TTFT_PHASES` began (None: it did not run)."""
    kv_start = None
    if t.decode_sent_s is not None:
        kv_start = t.decode_sent_s + (t.decode_queue_s or 0.0)
        if t.decode_first_s is not None:
            kv_start = min(kv_start, t.decode_first_s)
    return [("queue", t.arrived_s), ("prefill", t.first_call_s),
            ("decode_queue", t.decode_sent_s), ("kv_transfer", kv_start),
            ("first_decode", t.decode_first_s)]


def ttft_phases(t: Timeline, first_token_s: float) -> dict[str, float]:
    """Seconds of ``[arrived_s, first_token_s]`` in each phase of :data:`TTFT_PHASES`: each
    runs from its start to the next phase's that ran, cut at the first token."""
    ran = [(name, start) for name, start in _starts(t) if start is not None]
    spans = dict.fromkeys(TTFT_PHASES, 0.0)
    for i, (name, start) in enumerate(ran):
        end = ran[i + 1][1] if i + 1 < len(ran) else first_token_s
        begin = max(start, t.arrived_s)
        spans[name] = max(0.0, min(end, first_token_s) - begin)
    return spans


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def whole_phases(t: Timeline) -> dict[str, float]:
    """Seconds of every phase that ran, in full (absent: it did not run)."""
    decode_queue = t.decode_queue_s if t.decode_sent_s is not None else None
    to_first = _span(t.decode_sent_s, t.decode_first_s)
    spans = {
        "queue": _span(t.arrived_s, t.first_call_s),
        "prefill": _span(t.prefill_sent_s, t.prefill_done_s),
        "decode_queue": decode_queue,
        "kv_transfer": None if to_first is None else max(0.0, to_first - (decode_queue or 0.0)),
        "first_decode": _span(t.decode_first_s, t.decode_step_s),
        "decode": _span(t.decode_first_s, t.decode_last_s),
    }
    return {name: value for name, value in spans.items() if value is not None}


def request_timing(t: Timeline, *, now_s: float, num_out: int) -> dict[str, Any]:
    """The timing of a request about to get its final response at ``now_s`` (its first token
    then, if none went out before), ``num_out`` output tokens."""
    first_s = t.first_token_s if t.first_token_s is not None else now_s
    return {
        "ttft_ms": _ms(max(0.0, first_s - t.arrived_s)),
        **{f"{name}_ms": _ms(value) for name, value in ttft_phases(t, first_s).items()},
        "e2e_ms": _ms(max(0.0, now_s - t.arrived_s)),
        "path": None if t.path is None else str(t.path),
        "output_tokens": num_out,
        "migrations": t.migrations,
        "phases_ms": {name: _ms(value) for name, value in whole_phases(t).items()},
    }


def timing_json(t: Timeline, *, now_s: float, num_out: int) -> str:
    """:func:`request_timing` as the JSON text of the ``pdtrt_timing`` output."""
    return json.dumps(request_timing(t, now_s=now_s, num_out=num_out), sort_keys=True)
