"""OpenTelemetry spans of one process -- the OpenAI front, a router or an engine stub -- over OTLP.

:class:`Tracing` is the one place pdtrt touches OpenTelemetry: a ``TracerProvider`` of its own
(never the global one) with the process's ``service.name``
(:meth:`~pdtrt.tracing_settings.TracingSettings.service`), the sampler
``ParentBased(TraceIdRatioBased(ratio))`` -- a caller's sampled ``traceparent`` is always
followed -- and a ``BatchSpanProcessor`` over the OTLP/HTTP exporter
(``opentelemetry-exporter-otlp-proto-http``), which sends spans from a thread of its own, so no
request waits on the collector. :meth:`Tracing.shutdown` flushes what is queued (a stub calls
it in ``finalize``, the front when it stops): a span ended just before is not lost.

Spans carry explicit times: the router builds its spans from the request's timeline
(:mod:`pdtrt.runtime.router.trace`), whose marks are on a monotonic clock, so times cross as
epoch nanoseconds (:func:`wall_ns`). Context crosses processes as W3C Trace Context
``traceparent`` text (``00-<trace id>-<span id>-<flags>``): the HTTP header from an OpenAI
client, the request parameter :data:`TRACEPARENT` from a tritonclient caller and between
pdtrt's own hops (:func:`incoming_traceparent`).

When tracing is off (no endpoint: :func:`pdtrt.tracing_settings.stub_settings` returns None),
a stub never imports this module, and no process imports OpenTelemetry: the stubs' imports stay
bounded (tests/runtime/test_stub_imports.py).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from pdtrt.engine_io import TRACEPARENT_PARAMETER
from pdtrt.tracing_settings import TracingSettings

__all__ = ["TRACEPARENT", "Tracing", "incoming_traceparent", "valid_traceparent", "wall_ns"]

log = logging.getLogger(__name__)

# The W3C Trace Context header, and the request parameter of the same name that carries it
# through Triton (a tritonclient caller sets it as a request parameter; the router passes it
# on to the phase calls the same way)
TRACEPARENT = TRACEPARENT_PARAMETER
# version 00's layout; a later version may add fields after these (W3C Trace Context level 1,
# "traceparent Header Field Values"); all-zero ids and version ff are invalid
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
# How long shutdown waits for the exporter: a stub's finalize shares Triton's exit timeout (10 s,
# pdtrt.serve.triton_server) with its other steps, and a collector that is down would hold an
# export for the exporter's whole timeout and retries (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, 10 s)
FLUSH_S = 3.0


def valid_traceparent(text: str | None) -> str | None:
    """``text`` (trimmed, lower-cased) when it is a valid W3C ``traceparent``, else None: an
    invalid one is ignored, as the Trace Context specification asks (a new trace starts)."""
    if not text:
        return None
    value = text.strip().lower()
    m = _TRACEPARENT.match(value)
    if m is None or m.group(1) == "ff" or set(m.group(2)) == {"0"} or set(m.group(3)) == {"0"}:
        return None
    if m.group(1) == "00" and m.group(5):  # version 00 has exactly four fields
        return None
    return value


def incoming_traceparent(parameters: Mapping[str, Any]) -> str | None:
    """The valid ``traceparent`` request parameter of an incoming Triton request, if any."""
    value = parameters.get(TRACEPARENT)
    return valid_traceparent(value) if isinstance(value, str) else None


def wall_ns(at_s: float, clock: Callable[[], float]) -> int:
    """The epoch nanoseconds of ``at_s`` on ``clock`` (seconds, e.g. ``time.monotonic``)."""
    return time.time_ns() - int(round((clock() - at_s) * 1e9))


class Tracing:
    """One process's tracer: spans start, end and export to ``settings.endpoint``."""

    def __init__(self, settings: TracingSettings, role: str) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.settings = settings
        self._trace = trace
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": settings.service(role)}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
        self._provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint)))
        self._tracer = self._provider.get_tracer("pdtrt")
        self._propagator = TraceContextTextMapPropagator()
        self._closed = False

    def _context(self, parent: Any) -> Any:
        if parent is None:
            return None
        if isinstance(parent, str):
            return self._propagator.extract({TRACEPARENT: parent})
        return self._trace.set_span_in_context(parent)

    def start(self, name: str, *, parent: Any = None, start_ns: int | None = None,
              attributes: Mapping[str, Any] | None = None, server: bool = False) -> Any:
        """A span (opaque) named ``name``, child of ``parent`` -- a ``traceparent`` text, a
        span of this tracer, or None: a new trace; ``server``: it serves a remote caller."""
        kind = self._trace.SpanKind.SERVER if server else self._trace.SpanKind.INTERNAL
        return self._tracer.start_span(name, context=self._context(parent), kind=kind,
                                       start_time=start_ns,
                                       attributes=_attributes(attributes or {}))

    def annotate(self, span: Any, attributes: Mapping[str, Any]) -> None:
        span.set_attributes(_attributes(attributes))

    def end(self, span: Any, *, end_ns: int | None = None,
            attributes: Mapping[str, Any] | None = None, error: str | None = None) -> None:
        if attributes:
            span.set_attributes(_attributes(attributes))
        if error is not None:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, error))
        span.end(end_time=end_ns)

    def record(self, name: str, *, parent: Any, start_ns: int, end_ns: int,
               attributes: Mapping[str, Any] | None = None) -> Any:
        """A span that is over already (built from marks taken earlier)."""
        span = self.start(name, parent=parent, start_ns=start_ns, attributes=attributes)
        self.end(span, end_ns=max(end_ns, start_ns))
        return span

    def traceparent(self, span: Any) -> str:
        """``span``'s context as ``traceparent`` text, for the next hop."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        return carrier.get(TRACEPARENT, "")

    def shutdown(self, timeout_s: float = FLUSH_S) -> None:
        """Export what is queued, then stop (once); later spans are dropped. Waits at most
        ``timeout_s``: a collector that does not answer costs the spans, never the caller's
        stop (the export goes on in a daemon thread, which dies with the process)."""
        if self._closed:
            return
        self._closed = True

        def flush() -> None:
            try:
                self._provider.force_flush(int(timeout_s * 1000))
                self._provider.shutdown()
            except Exception:  # a collector that is down must not fail a model's finalize
                log.exception("flushing the traces to %s failed", self.settings.endpoint)

        done = threading.Thread(target=flush, name="pdtrt-trace-flush", daemon=True)
        done.start()
        done.join(timeout_s)
        if done.is_alive():
            log.warning("the traces were not flushed to %s within %.0f s; the last spans may "
                        "be lost", self.settings.endpoint, timeout_s)


def _attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """OpenTelemetry's attribute values: str, bool, int, float (None dropped, others str)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, (str, bool, int, float)) else str(value)
    return out
