"""Where one routed request's time went, and the histograms that collect it.

The router marks, on its own clock, when a request came, when its first phase call went out,
when the prefill call went out and answered, when the decode call went out and sent its first
and last response, when the client got its first and last token. At the end of a request that
succeeded, :func:`observe` turns the marks into one observation per histogram --
Prometheus histogram series made of Triton counters (:class:`~pdtrt.runtime.metrics.Metrics`:
``_bucket{le}``, ``_sum``, ``_count``; why not Triton's own histogram kind is said there), on
Triton's metrics port, where Prometheus's ``histogram_quantile`` gives p50/p90/p99 over any
window:

====================================  ===========================================================
``pdtrt_request_queue_seconds``       arrival at the router -> its first phase call sent (endpoint
                                      choice); a retried prefill's failed attempts count neither
                                      here nor in prefill, which times the last attempt
``pdtrt_request_prefill_seconds``     the prefill call sent -> its answer (first token and KV
                                      handle) back at the router
``pdtrt_request_kv_transfer_seconds`` the decode call sent -> the decode's first response: the
                                      KV pull and the hand-over to the decode engine
``pdtrt_request_decode_seconds``      the decode's first response -> its last
``pdtrt_request_ttft_seconds``        arrival -> the first token sent to the client
``pdtrt_request_tpot_seconds``        (last token - first token) / (tokens - 1): the request's
                                      mean inter-token time (per-token gaps: the OpenAI front's
                                      ``pdtrt_front_itl_seconds``; one observation per token here
                                      would put bucket work on the relay path of every token)
``pdtrt_request_e2e_seconds``         arrival -> the final response
``pdtrt_request_input_tokens``        prompt tokens
``pdtrt_request_output_tokens``       output tokens
``pdtrt_request_ttft_<phase>_seconds`` for ``prefill``, ``decode_queue``, ``kv_transfer`` and
                                      ``first_decode``: the part of the TTFT in that phase
                                      (:func:`pdtrt.runtime.router.timing.ttft_phases`, zero when
                                      it fell after the first token); with ``queue`` they
                                      partition ``ttft`` request by request, so their means add
                                      up to its mean (the dashboard stacks them)
``pdtrt_request_migration_seconds``   per migration (:mod:`~pdtrt.runtime.router.migration`):
                                      the client's last token before the failure -> its next
                                      token, from the continuation -- the time the migration
                                      added, the liveness deadline included (and one ordinary
                                      inter-token gap)
====================================  ===========================================================

The aggregated path has no prefill / KV / decode observations. Failed and cancelled requests
are not observed (they are counted by ``pdtrt_router_errors_total`` /
``pdtrt_router_cancelled_total``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pdtrt.prefill_policy import PrefillPath
from pdtrt.runtime.metrics import MetricKind, Metrics, MetricSpec

__all__ = ["HISTOGRAMS", "LATENCY_BUCKETS_S", "TOKEN_BUCKETS", "Timeline", "observe"]

# 1 ms .. 60 s: an ITL of a few ms on a GPU, a long prefill queue under load.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.07, 0.1, 0.15, 0.25, 0.4, 0.6,
                     1.0, 1.5, 2.5, 4.0, 6.0, 10.0, 20.0, 60.0)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 131072)

_H = MetricKind.HISTOGRAM


HISTOGRAMS = {  # literal names: tests read them back from the sources
    "queue": MetricSpec("pdtrt_request_queue_seconds", "Router arrival to the first phase "
                        "call, seconds", _H, LATENCY_BUCKETS_S),
    "prefill": MetricSpec("pdtrt_request_prefill_seconds", "Prefill call to its answer at the "
                          "router, seconds", _H, LATENCY_BUCKETS_S),
    "kv_transfer": MetricSpec("pdtrt_request_kv_transfer_seconds", "Decode call to its first "
                              "response (KV pull and hand-over), seconds", _H, LATENCY_BUCKETS_S),
    "decode": MetricSpec("pdtrt_request_decode_seconds", "Decode's first response to its last, "
                         "seconds", _H, LATENCY_BUCKETS_S),
    "ttft": MetricSpec("pdtrt_request_ttft_seconds", "Router arrival to the first token sent, "
                       "seconds", _H, LATENCY_BUCKETS_S),
    "tpot": MetricSpec("pdtrt_request_tpot_seconds", "A request's mean time between output "
                       "tokens, seconds", _H, LATENCY_BUCKETS_S),
    "e2e": MetricSpec("pdtrt_request_e2e_seconds", "Router arrival to the final response, "
                      "seconds", _H, LATENCY_BUCKETS_S),
    "input_tokens": MetricSpec("pdtrt_request_input_tokens", "Prompt tokens per request", _H,
                               TOKEN_BUCKETS),
    "output_tokens": MetricSpec("pdtrt_request_output_tokens", "Output tokens per request", _H,
                                TOKEN_BUCKETS),
    # the TTFT's phases (with "queue" above, which always ends before the first token)
    "ttft_prefill": MetricSpec("pdtrt_request_ttft_prefill_seconds", "Part of the TTFT from "
                               "the first phase call to the decode call sent, seconds", _H,
                               LATENCY_BUCKETS_S),
    "ttft_decode_queue": MetricSpec("pdtrt_request_ttft_decode_queue_seconds", "Part of the "
                                    "TTFT in the decode engine's queue, seconds", _H,
                                    LATENCY_BUCKETS_S),
    "ttft_kv_transfer": MetricSpec("pdtrt_request_ttft_kv_transfer_seconds", "Part of the TTFT "
                                   "in the KV pull and hand-over to decode, seconds", _H,
                                   LATENCY_BUCKETS_S),
    "ttft_first_decode": MetricSpec("pdtrt_request_ttft_first_decode_seconds", "Part of the "
                                    "TTFT from the decode's first response to the first token "
                                    "out, seconds", _H, LATENCY_BUCKETS_S),
    "migration": MetricSpec("pdtrt_request_migration_seconds", "Time a migration added: the "
                            "client's last token before the failure to its next one, seconds",
                            _H, LATENCY_BUCKETS_S),
}


@dataclass
class Timeline:
    """Marks of one request on the router's clock (seconds); None: did not happen."""

    arrived_s: float
    first_call_s: float | None = None
    prefill_sent_s: float | None = None
    prefill_done_s: float | None = None
    decode_sent_s: float | None = None
    decode_first_s: float | None = None
    decode_step_s: float | None = None  # the decode's second response: its first own token
    decode_last_s: float | None = None
    decode_queue_s: float | None = None  # the decode engine's own queue time, as it reports it
    first_token_s: float | None = None
    last_token_s: float | None = None
    migrations: int = 0  # times the request went on elsewhere after a mid-stream failure
    migration_gaps_s: list[float] = field(default_factory=list)  # what each one added
    migrated_after_s: float | None = None  # a migration's gap, open until the next token
    path: PrefillPath | None = None  # where its prefill ran (the first route, if migrated)

    def migrated(self, now_s: float) -> None:
        """The request goes on elsewhere: its gap runs from the last token out (else now)."""
        self.migrations += 1
        self.migrated_after_s = self.last_token_s if self.last_token_s is not None else now_s

    def call(self, now_s: float) -> None:
        """A phase call goes out (the first one ends the router's queue time)."""
        if self.first_call_s is None:
            self.first_call_s = now_s

    def decode_response(self, now_s: float) -> None:
        if self.decode_first_s is None:
            self.decode_first_s = now_s
        elif self.decode_step_s is None:
            self.decode_step_s = now_s
        self.decode_last_s = now_s

    def decode_sent(self, now_s: float) -> None:
        """A decode call goes out (again, when one is retried: its marks start afresh)."""
        self.decode_sent_s = now_s
        self.decode_first_s = self.decode_step_s = self.decode_last_s = None
        self.decode_queue_s = None

    def token_out(self, now_s: float) -> None:
        if self.migrated_after_s is not None:
            self.migration_gaps_s.append(max(0.0, now_s - self.migrated_after_s))
            self.migrated_after_s = None
        if self.first_token_s is None:
            self.first_token_s = now_s
        self.last_token_s = now_s


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(0.0, end - start)


def observe(metrics: Metrics, t: Timeline, *, end_s: float, num_in: int, num_out: int,
            ttft_phases_s: Mapping[str, float] | None = None) -> None:
    """One observation per histogram for a request that succeeded at ``end_s``;
    ``ttft_phases_s``: seconds of its TTFT per phase (``timing.ttft_phases``; None: it had no
    first token)."""
    spans = {
        "queue": _span(t.arrived_s, t.first_call_s),
        "prefill": _span(t.prefill_sent_s, t.prefill_done_s),
        "kv_transfer": _span(t.decode_sent_s, t.decode_first_s),
        "decode": _span(t.decode_first_s, t.decode_last_s),
        "ttft": _span(t.arrived_s, t.first_token_s),
        "tpot": (None if num_out < 2 or t.first_token_s is None or t.last_token_s is None
                 else max(0.0, t.last_token_s - t.first_token_s) / (num_out - 1)),
        "e2e": max(0.0, end_s - t.arrived_s),
        "input_tokens": float(num_in),
        "output_tokens": float(num_out),
    }
    for key, value in spans.items():
        if value is not None:
            metrics.observe(key, value)
    for phase, seconds in (ttft_phases_s or {}).items():
        if f"ttft_{phase}" in HISTOGRAMS:  # "queue" is observed whole above
            metrics.observe(f"ttft_{phase}", seconds)
    for gap_s in t.migration_gaps_s:
        metrics.observe("migration", gap_s)
