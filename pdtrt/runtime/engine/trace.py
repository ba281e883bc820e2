"""One engine request as OpenTelemetry spans, under the router's phase call that sent it.

A request that comes with a ``traceparent`` request parameter (the router's phase call; a
tritonclient caller may set one too), to an engine model whose process traces
(:class:`~pdtrt.runtime.tracing.Tracing`), gets when its final response goes out a span
named after the model's role -- ``prefill``, ``decode`` or ``aggregated`` -- from its arrival
at the model to that response, with ``pdtrt.request_id``, ``pdtrt.request_type``,
``pdtrt.prompt_tokens``, ``pdtrt.output_tokens``, ``pdtrt.queue_ms`` (arrival -> handed to the
LLM), ``pdtrt.first_token_ms`` (arrival -> its first token) and ``pdtrt.finish_reason``; a
failed one has status ERROR with the message.

A generation-only request's span has a child ``kv_transfer``: the KV pull as the LLM API
reports it -- ``outputs[0].request_perf_metrics.timing_metrics`` ``kv_cache_transfer_start`` /
``_end`` (steady-clock ``timedelta``) with ``pdtrt.kv_transfer.bytes`` = ``kv_cache_size``,
asked for with ``SamplingParams.return_perf_metrics`` only for such requests while tracing
(the fields TensorRT-LLM's OpenAI server reads, ``tensorrt_llm/serve/openai_server.py``;
the reference twin fills them, :mod:`pdtrt.llmapi.reference.outputs`). No ``kv_transfer``
span when the engine reports no transfer (``kv_cache_size`` 0).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from pdtrt.runtime.tracing import Tracing, incoming_traceparent, wall_ns
from pdtrt.tracing_settings import TracingSettings

__all__ = ["EngineTracing", "record_request"]


class EngineTracing:
    """An engine stub's tracer (``role``: its model's, the spans' name)."""

    def __init__(self, settings: TracingSettings, model_name: str, role: str) -> None:
        self.tracing = Tracing(settings, model_name)
        self.role = role

    @staticmethod
    def parent(parameters: Mapping[str, Any]) -> str | None:
        """The caller's valid ``traceparent`` request parameter, if any."""
        return incoming_traceparent(parameters)

    def record(self, out: Any) -> None:
        """The spans of ``out``, whose final response is going out (it has a parent)."""
        record_request(self.tracing, self.role, out, parent=out.trace_parent, error=out.error)

    def shutdown(self) -> None:
        self.tracing.shutdown()


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def record_request(tracing: Tracing, role: str, out: Any, *, parent: str,
                   error: str | None) -> None:
    """The span of ``out`` (a :class:`~pdtrt.runtime.engine.responder.Responder` whose final
    response is going out), and its KV transfer's."""
    request = out.request
    attributes: dict[str, Any] = {
        "pdtrt.request_id": request.request_id,
        "pdtrt.request_type": str(request.mode),
        "pdtrt.prompt_tokens": len(request.prompt),
        "pdtrt.output_tokens": len(out.tokens),
        "pdtrt.queue_ms": _ms(out.submitted_ns - out.arrival_ns) if out.submitted_ns else None,
        "pdtrt.first_token_ms": (_ms(out.first_token_ns - out.arrival_ns)
                                 if out.first_token_ns else None),
    }
    output = out.result.outputs[0] if out.result is not None else None
    if output is not None:
        attributes["pdtrt.finish_reason"] = output.finish_reason
    span = tracing.start(role, parent=parent, server=True, start_ns=out.arrival_ns,
                         attributes=attributes)
    timing = getattr(getattr(output, "request_perf_metrics", None), "timing_metrics", None)
    if timing is not None and timing.kv_cache_size > 0:
        tracing.record("kv_transfer", parent=span,
                       start_ns=_steady_ns(timing.kv_cache_transfer_start),
                       end_ns=_steady_ns(timing.kv_cache_transfer_end),
                       attributes={"pdtrt.kv_transfer.bytes": int(timing.kv_cache_size)})
    tracing.end(span, end_ns=time.time_ns(), error=error)


def _steady_ns(at: Any) -> int:
    """Epoch nanoseconds of a steady-clock time the LLM API gives as a ``timedelta``."""
    return wall_ns(at.total_seconds(), time.monotonic)
