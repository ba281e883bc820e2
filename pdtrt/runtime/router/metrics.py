"""The router's Prometheus metrics: the table of what it counts, and the :class:`Metrics` made
from it with one label set per phase, endpoint, and prefill path and reason.

Requests, errors, cancellations, TTFT, per-phase queue time, retries and migrations (by phase
and reason); per endpoint: calls, health,
ejections, re-admissions, stalled calls and the KV index; and per request that succeeded,
histograms of where its time went (:data:`~pdtrt.runtime.router.timeline.HISTOGRAMS`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pdtrt.engine_io import PHASE_ROLES, Role
from pdtrt.prefill_policy import PATH_REASONS
from pdtrt.runtime.metrics import MetricKind, Metrics, MetricSink, MetricSpec
from pdtrt.runtime.router.pool import EndpointPool
from pdtrt.runtime.router.reload_losses import IN_FLIGHT_METRIC, LOST_METRIC
from pdtrt.runtime.router.retry import MigrationReason
from pdtrt.runtime.router.timeline import HISTOGRAMS

__all__ = ["METRICS_FLUSH_S", "ROUTER_METRICS", "router_metrics"]

_COUNTER, _GAUGE = MetricKind.COUNTER, MetricKind.GAUGE
ROUTER_METRICS = {
    "requests": MetricSpec("pdtrt_router_requests_total", "Requests routed", _COUNTER),
    "errors": MetricSpec("pdtrt_router_errors_total", "Requests that ended in an error",
                         _COUNTER),
    "cancelled": MetricSpec("pdtrt_router_cancelled_total", "Requests cancelled by clients",
                            _COUNTER),
    "ttft_s": MetricSpec("pdtrt_router_ttft_seconds_total",
                         "Sum of router-side time to first token, seconds", _COUNTER),
    "aggregated": MetricSpec("pdtrt_router_aggregated_total",
                             "Short requests sent to the aggregated path", _COUNTER),
    # labelled by path and reason (prefill_policy.PATH_REASONS)
    "paths": MetricSpec("pdtrt_router_prefill_path_total",
                        "Requests by where their prefill ran -- aggregated, local (the decode "
                        "endpoint itself) or remote (a prefill endpoint) -- and why", _COUNTER),
    "prefill_queue_s": MetricSpec("pdtrt_prefill_queue_seconds_total",
                                  "Sum of prefill queue time, seconds", _COUNTER),
    "decode_queue_s": MetricSpec("pdtrt_decode_queue_seconds_total",
                                 "Sum of decode queue time (after the KV pull), seconds",
                                 _COUNTER),
    "fallbacks": MetricSpec("pdtrt_router_fallbacks_total",
                            "Requests sent to the aggregated path after the disaggregated one "
                            "failed", _COUNTER),
    "in_flight": MetricSpec(IN_FLIGHT_METRIC, "Requests being routed now", _GAUGE),
    "lost": MetricSpec(LOST_METRIC, "Requests in flight when a process of this router died "
                       "(never ended by Triton; counted by pdtrt serve's supervisor)",
                       _COUNTER),
    # labelled by phase
    "retries": MetricSpec("pdtrt_router_retries_total",
                          "Phase calls retried on another endpoint after a failure", _COUNTER),
    # labelled by phase and reason (retry.MigrationReason)
    "migrations": MetricSpec("pdtrt_router_migrations_total",
                             "Requests continued on another endpoint after their phase died, "
                             "stalled or failed mid-stream", _COUNTER),
    # labelled by phase and endpoint
    "calls": MetricSpec("pdtrt_router_endpoint_calls_total",
                        "Phase calls sent to each endpoint", _COUNTER),
    "healthy": MetricSpec("pdtrt_router_endpoint_healthy",
                          "1 while an endpoint answers its health probes, 0 while ejected",
                          _GAUGE),
    "ejections": MetricSpec("pdtrt_router_endpoint_ejections_total",
                            "Times an endpoint was ejected after a failed health probe",
                            _COUNTER),
    "readmissions": MetricSpec("pdtrt_router_endpoint_readmissions_total",
                               "Times an ejected endpoint was re-admitted", _COUNTER),
    "stalled": MetricSpec("pdtrt_router_stalled_calls_total",
                          "Phase calls ended because their endpoint stopped answering",
                          _COUNTER),
    # KV-aware routing (labelled by phase and endpoint): what each endpoint's KV index holds
    "kv_blocks": MetricSpec("pdtrt_router_kv_index_blocks",
                            "KV blocks an endpoint holds, as its KV events told the router",
                            _GAUGE),
    # labelled by phase: prompt tokens sent to the pool, and those the chosen endpoint's index
    # said it had cached (the engines count what they reused: pdtrt_engine_kv_reused_blocks)
    "kv_prompt_tokens": MetricSpec("pdtrt_router_kv_prompt_tokens_total",
                                   "Prompt tokens of the calls routed by KV", _COUNTER),
    "kv_cached_tokens": MetricSpec("pdtrt_router_kv_cached_tokens_total",
                                   "Prompt tokens the chosen endpoint held, as its KV index "
                                   "said when it was chosen", _COUNTER),
}
# The router's counters reach Triton's metrics endpoint within this many seconds: summed and
# sent together, not one round trip to the server per increment (six per request).
METRICS_FLUSH_S = 0.1
_BY_PHASE = ("retries", "kv_prompt_tokens", "kv_cached_tokens")
_BY_ENDPOINT = ("calls", "healthy", "ejections", "readmissions", "stalled", "kv_blocks")


def router_metrics(triton: MetricSink, model_name: str,
                   pools: Mapping[Role, EndpointPool]) -> Metrics:
    """The router's metrics, every endpoint of ``pools`` counted healthy (sent every
    :data:`METRICS_FLUSH_S`)."""
    endpoint_labels = [{"phase": str(role), "endpoint": e.label}
                       for role, pool in pools.items() for e in pool.endpoints]
    phase_labels = [{"phase": str(role)} for role in PHASE_ROLES]
    metrics = Metrics(triton, {**ROUTER_METRICS, **HISTOGRAMS}, {"model": model_name}, by={
        **{key: phase_labels for key in _BY_PHASE},
        "paths": [{"path": str(path), "reason": str(reason)} for path, reason in PATH_REASONS],
        "migrations": [{"phase": str(role), "reason": str(reason)}
                       for role in PHASE_ROLES for reason in MigrationReason],
        **{key: endpoint_labels for key in _BY_ENDPOINT}}, flush_s=METRICS_FLUSH_S)
    for labels in endpoint_labels:
        metrics.set("healthy", 1, **labels)
    return metrics
