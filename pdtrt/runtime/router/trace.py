"""One routed request as OpenTelemetry spans: the router's span, one per phase call, and the
phases the timeline saw.

With tracing on (:class:`RouterTracing`, which the router stub loads only then), each request
gets a :class:`RequestTrace`: the span ``router`` from its arrival to its final response, child of
the caller's ``traceparent`` (the request parameter :data:`~pdtrt.runtime.tracing.TRACEPARENT`;
none: a trace of its own). Each phase call is a child span named after the pool it goes to --
``prefill call``, ``decode call``, ``aggregated call`` -- open while its stream is, whose
``traceparent`` goes to the engine as the call's request parameter, so the engine's spans hang
below it. When the request ends, the spans the router does not time itself are built from its
:class:`~pdtrt.runtime.router.timeline.Timeline` (the marks the histograms and ``pdtrt_timing``
use; nothing is timed twice): ``queue`` (arrival -> the first phase call) and ``kv_transfer``
(below the last decode call: its engine's queue time after the call went out -> the decode's
first response, the router's view of the KV pull and hand-over), and the router span gets the
request's timing (:func:`~pdtrt.runtime.router.timing.request_timing`) as attributes.

Attributes (``pdtrt.*``): on ``router`` the request id, path, tokens in and out, migrations and
each TTFT phase in ms; on a call its endpoint, request type and error; a failed request's or
call's span has status ERROR with the message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pdtrt.engine_io import RequestType, Role
from pdtrt.runtime.router.timeline import Timeline
from pdtrt.runtime.router.timing import request_timing
from pdtrt.runtime.tracing import Tracing, incoming_traceparent, wall_ns
from pdtrt.tracing_settings import TracingSettings

__all__ = ["RequestTrace", "RouterTracing"]


class RouterTracing:
    """The router stub's tracer: a :class:`RequestTrace` per request."""

    def __init__(self, settings: TracingSettings, clock: Callable[[], float]) -> None:
        self.tracing = Tracing(settings, "router")
        self.clock = clock

    def request(self, parameters: Mapping[str, Any], timeline: Timeline,
                request_id: str) -> RequestTrace:
        """The spans of a request that came with ``parameters`` (its caller's traceparent)."""
        return RequestTrace(self.tracing, self.clock, parent=incoming_traceparent(parameters),
                            timeline=timeline, request_id=request_id)

    def shutdown(self) -> None:
        self.tracing.shutdown()


class RequestTrace:
    """The spans of one request; ``clock`` is the timeline's (seconds)."""

    def __init__(self, tracing: Tracing, clock: Callable[[], float], *, parent: str | None,
                 timeline: Timeline, request_id: str) -> None:
        self.tracing, self.clock = tracing, clock
        # the timeline's clock -> epoch ns, once per request: its spans' times then differ
        # exactly as its marks do
        self._epoch_ns = wall_ns(0.0, clock)
        self.span = tracing.start("router", parent=parent, server=True,
                                  start_ns=self._ns(timeline.arrived_s),
                                  attributes={"pdtrt.request_id": request_id})
        self._last_decode: Any = None  # the last decode call's span: the KV transfer's parent

    def call_started(self, role: Role, endpoint: str, request_type: RequestType) -> Any:
        """A phase call goes out now; its span (pass it to :meth:`traceparent`)."""
        span = self.tracing.start(f"{role} call", parent=self.span,
                                  start_ns=self._ns(self.clock()),
                                  attributes={"pdtrt.endpoint": endpoint,
                                              "pdtrt.request_type": request_type.value})
        if request_type is RequestType.GENERATION_ONLY:
            self._last_decode = span
        return span

    def traceparent(self, span: Any) -> str:
        return self.tracing.traceparent(span)

    def call_ended(self, span: Any, error: str | None = None) -> None:
        self.tracing.end(span, end_ns=self._ns(self.clock()), error=error)

    def finish(self, t: Timeline, *, num_in: int, num_out: int, error: str | None,
               end_s: float | None) -> None:
        """The request has ended (``error``: how it failed; ``end_s``: when its final response
        went out, None: now): the timeline's spans, then the router span with the request's
        timing. The span ends when the final response went out, not when this is called: the
        caller's span may close as soon as it has that response, and a child must not outlive
        its parent."""
        now_s = self.clock() if end_s is None else end_s
        if t.first_call_s is not None:
            self._record("queue", self.span, t.arrived_s, t.first_call_s)
        if self._last_decode is not None and t.decode_sent_s is not None \
                and t.decode_first_s is not None:
            start_s = min(t.decode_sent_s + (t.decode_queue_s or 0.0), t.decode_first_s)
            self._record("kv_transfer", self._last_decode, start_s, t.decode_first_s)
        timing = request_timing(t, now_s=now_s, num_out=num_out)
        attributes = {f"pdtrt.{k}": v for k, v in timing.items() if not isinstance(v, dict)}
        attributes["pdtrt.input_tokens"] = num_in
        if t.migration_gaps_s:
            attributes["pdtrt.migration_gaps_ms"] = ",".join(
                f"{gap * 1000:.3f}" for gap in t.migration_gaps_s)
        self.tracing.end(self.span, end_ns=self._ns(now_s), attributes=attributes,
                         error=error)

    def _ns(self, at_s: float) -> int:
        return self._epoch_ns + int(round(at_s * 1e9))

    def _record(self, name: str, parent: Any, start_s: float, end_s: float) -> None:
        self.tracing.record(name, parent=parent, start_ns=self._ns(start_s),
                            end_ns=self._ns(end_s))
