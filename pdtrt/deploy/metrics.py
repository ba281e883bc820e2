"""The Prometheus metric names a deployment exports, per target -- what dashboards and
autoscalers may query, and nothing else.

- **pdtrt's router** (the front, every target) and **pdtrt's engine model** (the reference
  target's pools): the families :mod:`pdtrt.runtime` declares. Tests read them back from the
  runtime's sources, so a renamed metric fails there, not on a dashboard.
- **Triton's own**, on every server's metrics port: per-model inference counters and
  durations, and CPU metrics (``nv_cpu_*``) on every server; GPU metrics (``nv_gpu_*``) on GPU
  pods. Names as Triton's docs/user_guide/metrics.md lists them; the reference target's are
  also checked against a running embedded server (tests, marked ``triton``).
- **TensorRT-LLM's Triton backend** (trtllm-0.21 pools): families of its
  ``custom_metrics_reporter.cc`` (inflight_batcher_llm; read at a later commit than v0.21.0).
  Only label values of the backend's early releases are used (request_type ``active``,
  kv_cache_block_type ``used`` / ``max``), not the later ``waiting`` / ``fraction``;
  ``nv_trt_llm_disaggregated_serving_metrics`` is left out on purpose: the backend does not
  report it in orchestrator mode, the mode pdtrt's trtllm-0.21 launch uses.

The router's per-request histograms (:mod:`pdtrt.runtime.router.timeline`: queue, prefill,
KV transfer, decode, TTFT, mean inter-token time, end to end, tokens in and out) are families
of Prometheus type histogram: a query reads their ``_bucket`` / ``_sum`` / ``_count`` series
(:func:`family_of` maps a series back to its family).

- **pdtrt's OpenAI front** (:mod:`pdtrt.front.metrics`, ``prometheus_client``, on the front's
  own port at ``/metrics``; every front pod runs it): requests by endpoint and status, clients
  that hung up, requests in flight, and histograms of TTFT, every token's gap (the per-token
  inter-token latency only the front sees), end to end and tokens in and out. Tests read them
  back from the front's sources and from a real front's scrape.

What is *not* exported yet, so no panel can show it honestly: KV-transfer time and bytes on
trtllm-0.21.
"""

from __future__ import annotations

from pdtrt.enums import Target

__all__ = ["FRONT", "HISTOGRAM_FAMILIES", "PROMETHEUS", "ROUTER", "exported", "family_of"]

# pdtrt's router model (pdtrt.runtime.router.metrics)
ROUTER_REQUESTS = "pdtrt_router_requests_total"
ROUTER_ERRORS = "pdtrt_router_errors_total"
ROUTER_CANCELLED = "pdtrt_router_cancelled_total"
ROUTER_TTFT_SECONDS = "pdtrt_router_ttft_seconds_total"
PREFILL_QUEUE_SECONDS = "pdtrt_prefill_queue_seconds_total"
DECODE_QUEUE_SECONDS = "pdtrt_decode_queue_seconds_total"
ROUTER_RETRIES = "pdtrt_router_retries_total"  # label phase
ROUTER_FALLBACKS = "pdtrt_router_fallbacks_total"
ROUTER_STALLED = "pdtrt_router_stalled_calls_total"  # labels phase, endpoint
ROUTER_EJECTIONS = "pdtrt_router_endpoint_ejections_total"  # labels phase, endpoint
ROUTER_HEALTHY = "pdtrt_router_endpoint_healthy"  # gauge; labels phase, endpoint
ROUTER_PREFILL_PATHS = "pdtrt_router_prefill_path_total"  # labels path, reason
# histograms of every request that succeeded (pdtrt.runtime.router.timeline)
REQUEST_QUEUE = "pdtrt_request_queue_seconds"
REQUEST_PREFILL = "pdtrt_request_prefill_seconds"
REQUEST_KV_TRANSFER = "pdtrt_request_kv_transfer_seconds"
REQUEST_DECODE = "pdtrt_request_decode_seconds"
REQUEST_TTFT = "pdtrt_request_ttft_seconds"
REQUEST_TPOT = "pdtrt_request_tpot_seconds"
REQUEST_E2E = "pdtrt_request_e2e_seconds"
REQUEST_INPUT_TOKENS = "pdtrt_request_input_tokens"
# the parts of the TTFT after the queue (pdtrt.runtime.router.timing.TTFT_PHASES), in order:
# with REQUEST_QUEUE they partition REQUEST_TTFT request by request
REQUEST_TTFT_PHASES = ("pdtrt_request_ttft_prefill_seconds",
                       "pdtrt_request_ttft_decode_queue_seconds",
                       "pdtrt_request_ttft_kv_transfer_seconds",
                       "pdtrt_request_ttft_first_decode_seconds")
REQUEST_OUTPUT_TOKENS = "pdtrt_request_output_tokens"
ROUTER_HISTOGRAMS = frozenset({REQUEST_QUEUE, REQUEST_PREFILL, REQUEST_KV_TRANSFER,
                               REQUEST_DECODE, REQUEST_TTFT, REQUEST_TPOT, REQUEST_E2E,
                               REQUEST_INPUT_TOKENS, REQUEST_OUTPUT_TOKENS,
                               *REQUEST_TTFT_PHASES})
ROUTER = frozenset({ROUTER_REQUESTS, ROUTER_ERRORS, ROUTER_CANCELLED, ROUTER_TTFT_SECONDS,
                    PREFILL_QUEUE_SECONDS, DECODE_QUEUE_SECONDS, ROUTER_RETRIES,
                    ROUTER_FALLBACKS, ROUTER_STALLED, ROUTER_EJECTIONS, ROUTER_HEALTHY,
                    ROUTER_PREFILL_PATHS} | ROUTER_HISTOGRAMS)

# pdtrt's OpenAI front (pdtrt.front.metrics), on its own port
FRONT_REQUESTS = "pdtrt_front_requests_total"  # labels endpoint, status
FRONT_DISCONNECTS = "pdtrt_front_disconnects_total"
FRONT_IN_FLIGHT = "pdtrt_front_requests_in_flight"  # gauge
FRONT_TTFT = "pdtrt_front_ttft_seconds"
FRONT_ITL = "pdtrt_front_itl_seconds"
FRONT_E2E = "pdtrt_front_e2e_seconds"
FRONT_INPUT_TOKENS = "pdtrt_front_input_tokens"
FRONT_OUTPUT_TOKENS = "pdtrt_front_output_tokens"
FRONT_HISTOGRAMS = frozenset({FRONT_TTFT, FRONT_ITL, FRONT_E2E, FRONT_INPUT_TOKENS,
                              FRONT_OUTPUT_TOKENS})
FRONT = frozenset({FRONT_REQUESTS, FRONT_DISCONNECTS, FRONT_IN_FLIGHT}) | FRONT_HISTOGRAMS

# pdtrt's LLM-API engine model (pdtrt.runtime.engine.model); the KV ones from the reference
ENGINE_ACTIVE = "pdtrt_engine_active_sequences"
ENGINE_FAILED = "pdtrt_engine_failed_total"
KV_TRANSFERS = "pdtrt_kv_transfers_total"
KV_TRANSFER_SECONDS = "pdtrt_kv_transfer_seconds_total"
KV_TRANSFER_BYTES = "pdtrt_kv_transfer_bytes_total"
KV_HELD = "pdtrt_kv_held_buffers"
KV_EXPIRED = "pdtrt_kv_expired_total"
ENGINE = frozenset({ENGINE_ACTIVE, ENGINE_FAILED, KV_TRANSFERS, KV_TRANSFER_SECONDS,
                    KV_TRANSFER_BYTES, KV_HELD, KV_EXPIRED})

# Triton, every server
INFERENCE_SUCCESS = "nv_inference_request_success"
INFERENCE_FAILURE = "nv_inference_request_failure"
QUEUE_DURATION_US = "nv_inference_queue_duration_us"
CPU_UTILIZATION = "nv_cpu_utilization"
TRITON = frozenset({INFERENCE_SUCCESS, INFERENCE_FAILURE, QUEUE_DURATION_US, CPU_UTILIZATION})
# Triton, GPU servers
GPU_UTILIZATION = "nv_gpu_utilization"
TRITON_GPU = frozenset({GPU_UTILIZATION})

# TensorRT-LLM's Triton backend
TRTLLM_REQUESTS = "nv_trt_llm_request_metrics"  # gauge; label request_type
TRTLLM_KV_BLOCKS = "nv_trt_llm_kv_cache_block_metrics"  # gauge; label kv_cache_block_type
TRTLLM_BACKEND = frozenset({TRTLLM_REQUESTS, TRTLLM_KV_BLOCKS})

# every histogram family, the router's and the front's
HISTOGRAM_FAMILIES = ROUTER_HISTOGRAMS | FRONT_HISTOGRAMS

# Series Prometheus itself writes for every scrape target (1 when the scrape succeeded).
UP = "up"
PROMETHEUS = frozenset({UP})

_BY_TARGET = {
    Target.REFERENCE: ROUTER | FRONT | ENGINE | TRITON | PROMETHEUS,
    Target.TRTLLM_0_21: ROUTER | FRONT | TRITON | TRITON_GPU | TRTLLM_BACKEND | PROMETHEUS,
    # pdtrt's LLM-API engine model publishes the engine model's metrics
    Target.TRTLLM_1_2: ROUTER | FRONT | ENGINE | TRITON | TRITON_GPU | PROMETHEUS,
}


def exported(target: Target) -> frozenset[str]:
    """Every metric name a deployment of ``target`` exports (Prometheus's ``up`` included)."""
    return _BY_TARGET[target]


_SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def family_of(series: str) -> str:
    """The metric family of a series name: a histogram's ``_bucket`` / ``_sum`` / ``_count``
    series belong to it; any other name is its own family."""
    for suffix in _SERIES_SUFFIXES:
        if series.endswith(suffix) and series[:-len(suffix)] in HISTOGRAM_FAMILIES:
            return series[:-len(suffix)]
    return series
