"""The LLM-API engine model's Prometheus metrics, and the LLM API's stats turned into them.

The names are a contract: the deploy dashboards, the serve tests and ``benchmarks/soak.py``
read them. :class:`StatsPublisher` reads ``LLM.get_stats`` -- TensorRT-LLM's iteration stats
(``numQueuedRequests``, ``kvCacheStats``), which upstream returns only with the option
``enable_iter_perf_stats`` (pdtrt writes it for every phase) and only after the first request;
its cumulative block-reuse counts become ``pdtrt_engine_kv_{reused,missed}_blocks_total`` --
and, from the reference implementation, its UCX transceiver's counters
(``_pdtrt_kv_transfer_stats``: KV held for a decode pull, expired, pulled with bytes and seconds;
``tensorrt_llm`` has no such call, so the transfer counters stay 0 on a GPU). Held KV is
counted either way: the transceiver's own count on the reference, else the engine model's count
of hand-offs whose ``kv_transfer_timeout_ms`` has not run out (an upper bound: upstream does not
tell the prefill side when a decode has pulled). Counters grow by the difference since the last
read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pdtrt.runtime.metrics import MetricKind, Metrics, MetricSpec

__all__ = ["METRICS", "StatsPublisher"]

log = logging.getLogger(__name__)

_COUNTER, _GAUGE = MetricKind.COUNTER, MetricKind.GAUGE
METRICS = {
    "kv_seconds": MetricSpec("pdtrt_kv_transfer_seconds_total",
                             "Seconds spent pulling KV caches over UCX (decode side)", _COUNTER),
    "kv_count": MetricSpec("pdtrt_kv_transfers_total", "KV caches pulled (decode side)",
                           _COUNTER),
    "kv_bytes": MetricSpec("pdtrt_kv_transfer_bytes_total", "KV bytes pulled over UCX",
                           _COUNTER),
    "kv_held": MetricSpec("pdtrt_kv_held_buffers", "KV caches held for a decode pull (on a "
                          "GPU: hand-offs within their kv_transfer_timeout_ms)", _GAUGE),
    "kv_expired": MetricSpec("pdtrt_kv_expired_total",
                             "Held KV caches freed by kv_transfer_timeout_ms (reference)", _GAUGE),
    "cancelled": MetricSpec("pdtrt_engine_cancelled_total",
                            "Sequences stopped before their end (client cancel or stop request)",
                            _COUNTER),
    "failed": MetricSpec("pdtrt_engine_failed_total", "Requests that ended in an engine error",
                         _COUNTER),
    "queue_s": MetricSpec("pdtrt_engine_queue_seconds_total",
                          "Seconds requests waited before the LLM API took them", _COUNTER),
    "requests": MetricSpec("pdtrt_engine_requests_total", "Requests the engine finished",
                           _COUNTER),
    "prompt_tokens": MetricSpec("pdtrt_engine_prompt_tokens_total",
                                "Prompt tokens of the requests the engine prefilled (cached "
                                "ones included: less pdtrt_engine_kv_reused_blocks_total x the "
                                "block size, what it computed)", _COUNTER),
    "active": MetricSpec("pdtrt_engine_active_sequences",
                         "Requests the engine model holds (in flight)", _GAUGE),
    "queued": MetricSpec("pdtrt_engine_queued_requests",
                         "Requests the LLM API has queued, not yet scheduled", _GAUGE),
    "kv_usage": MetricSpec("pdtrt_engine_kv_cache_usage_ratio",
                           "Used / total KV cache blocks of the LLM API's KV cache", _GAUGE),
    "kv_reused": MetricSpec("pdtrt_engine_kv_reused_blocks_total",
                            "Prompt KV blocks taken from the block-reuse cache", _COUNTER),
    "kv_missed": MetricSpec("pdtrt_engine_kv_missed_blocks_total",
                            "Prompt KV blocks computed: not in the block-reuse cache", _COUNTER),
}
# kvCacheStats counters (cumulative upstream) -> ours, grown by their difference
_KV_COUNTERS = {"reusedBlocks": "kv_reused", "missedBlocks": "kv_missed"}
_GAUGES = {"held": "kv_held", "expired": "kv_expired"}
_COUNTERS = {"pulled": "kv_count", "pulled_bytes": "kv_bytes", "pull_s": "kv_seconds"}


class StatsPublisher:
    def __init__(self, metrics: Metrics, llm: Any, *,
                 transfer_stats: Callable[[], dict[str, float]] | None = None) -> None:
        self.metrics = metrics
        self._llm: Any = llm
        self._transfer_stats = transfer_stats  # the reference LLM's; None on tensorrt_llm
        # get_stats before the first request returns nothing and logs a warning upstream (every
        # poll, every instance): not asked until the engine model has submitted one
        self.submitted = False
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        # the latest kvCacheStats' blocks, for kv_capacity routing ({}: none read yet)
        self.kv_capacity: dict[str, int] = {}

    def detach(self) -> None:
        """The LLM is shut down: publish only what the engine model itself counts."""
        self._llm = None
        self._transfer_stats = None

    def publish(self, *, num_live: int, num_held: int) -> None:
        """``num_held``: the engine model's count of KV hand-offs within their timeout, used
        when the LLM cannot say how many it holds."""
        with self._lock:
            self.metrics.set("active", num_live)
            self.metrics.set("kv_held", num_held)
            if self._llm is None:
                return
            try:
                snapshots = self._llm.get_stats(0) if self.submitted else []
                transfer = self._transfer_stats() if self._transfer_stats else {}
            except Exception:  # stats must never fail a request
                log.debug("get_stats failed", exc_info=True)
                return
            if snapshots:
                self._apply(snapshots[-1])
            self._apply_transfer(transfer)

    def _apply(self, stats: dict[str, Any]) -> None:
        if "numQueuedRequests" in stats:
            self.metrics.set("queued", stats["numQueuedRequests"])
        kv = stats.get("kvCacheStats") or {}
        if kv.get("maxNumBlocks"):
            self.metrics.set("kv_usage", kv.get("usedNumBlocks", 0) / kv["maxNumBlocks"])
            self.kv_capacity = {"max_blocks": int(kv["maxNumBlocks"]),
                                "used_blocks": int(kv.get("usedNumBlocks", 0)),
                                "tokens_per_block": int(kv.get("tokensPerBlock", 0))}
        self._grow({f"kvCacheStats.{k}": kv[k] for k in _KV_COUNTERS if k in kv},
                   {f"kvCacheStats.{k}": m for k, m in _KV_COUNTERS.items()})

    def _apply_transfer(self, transfer: dict[str, float]) -> None:
        for key, metric in _GAUGES.items():
            if key in transfer:
                self.metrics.set(metric, transfer[key])
        self._grow(transfer, _COUNTERS)

    def _grow(self, totals: dict[str, float], metrics: dict[str, str]) -> None:
        """Counters from running totals: each grows by its total's increase since the last
        read."""
        for key, metric in metrics.items():
            if key in totals:
                delta = totals[key] - self._last.get(key, 0)
                self._last[key] = totals[key]
                if delta > 0:
                    self.metrics.add(metric, delta)
