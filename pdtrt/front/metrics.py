"""The OpenAI front's own Prometheus metrics, on its port at ``/metrics``.

What only the front sees: every token's arrival, so the true inter-token latency
distribution (the router observes one mean per request, ``pdtrt_request_tpot_seconds``:
a histogram observation inside Triton is a round trip to the server, too dear per token), the
client-side TTFT and end-to-end time, requests by endpoint and HTTP status, and clients that
hung up. Exported with ``prometheus_client`` (its own registry per front, so two fronts in one
process never share series), the buckets the router's histograms use.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pdtrt.runtime.router.timeline import LATENCY_BUCKETS_S, TOKEN_BUCKETS

__all__ = ["CONTENT_TYPE", "FrontMetrics", "RequestTimer"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class FrontMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter("pdtrt_front_requests", "Requests answered, by endpoint and "
                                "HTTP status", ["endpoint", "status"], registry=reg)
        self.disconnects = Counter("pdtrt_front_disconnects", "Requests whose client hung up "
                                   "before the end (stopped on the server)", registry=reg)
        self.in_flight = Gauge("pdtrt_front_requests_in_flight", "Requests being generated",
                               registry=reg)
        self.ttft = Histogram("pdtrt_front_ttft_seconds", "Request received to its first "
                              "token from the deployment, seconds", registry=reg,
                              buckets=LATENCY_BUCKETS_S)
        self.itl = Histogram("pdtrt_front_itl_seconds", "Time between consecutive token "
                             "responses of a request, seconds", registry=reg,
                             buckets=LATENCY_BUCKETS_S)
        self.e2e = Histogram("pdtrt_front_e2e_seconds", "Request received to its last token, "
                             "seconds", registry=reg, buckets=LATENCY_BUCKETS_S)
        self.input_tokens = Histogram("pdtrt_front_input_tokens", "Prompt tokens per request",
                                      registry=reg, buckets=TOKEN_BUCKETS)
        self.output_tokens = Histogram("pdtrt_front_output_tokens", "Output tokens per "
                                       "request", registry=reg, buckets=TOKEN_BUCKETS)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestTimer:
    """One request's token arrivals on the event loop's clock, observed into the front's
    histograms (``now`` is injected: tests give their own clock)."""

    def __init__(self, metrics: FrontMetrics, now: Callable[[], float]) -> None:
        self.metrics, self.now = metrics, now
        self.start_s = now()
        self.last_s: float | None = None

    def tokens(self, count: int) -> None:
        """A response with ``count`` tokens arrived: the first one is the TTFT; after it, its
        gap spread over its tokens (``count`` ITL samples of gap / count, one per token, as
        ``pdtrt bench`` counts them: a deployment's ``stream_interval`` puts several tokens in
        one response)."""
        if count <= 0:
            return
        t = self.now()
        if self.last_s is None:
            self.metrics.ttft.observe(t - self.start_s)
        else:
            for _ in range(count):
                self.metrics.itl.observe((t - self.last_s) / count)
        self.last_s = t

    def finish(self, *, num_in: int, num_out: int) -> None:
        """The request ended with its tokens (not on an error or a hang-up)."""
        self.metrics.e2e.observe((self.last_s or self.now()) - self.start_s)
        self.metrics.input_tokens.observe(num_in)
        self.metrics.output_tokens.observe(num_out)
