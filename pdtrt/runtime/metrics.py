"""Prometheus metrics of a Triton model, declared as data and kept by :class:`Metrics`.

A model declares its metrics as :class:`MetricSpec` tables (the router's in
:mod:`pdtrt.runtime.router.metrics`, the engine model's in :mod:`pdtrt.runtime.engine.metrics`)
and updates them through :class:`Metrics`, which reaches Triton only through the seam's metric
calls (:class:`MetricSink`, which :class:`~pdtrt.runtime.triton_io.BackendTriton` implements
under its lock). Nothing here calls ``pb_utils``.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

__all__ = ["MetricKind", "MetricSink", "MetricSpec", "Metrics"]


class MetricKind(StrEnum):
    """Kinds of metrics: Triton custom metrics (``pb_utils.MetricFamily.COUNTER`` /
    ``GAUGE``), and ``HISTOGRAM``, which :class:`Metrics` exports as Prometheus's histogram
    series made of counters (``<name>_bucket{le}``, ``<name>_sum``, ``<name>_count``; see
    there why not Triton's own histogram kind)."""

    COUNTER = "COUNTER"
    GAUGE = "GAUGE"
    HISTOGRAM = "HISTOGRAM"


@dataclass(frozen=True)
class MetricSpec:
    name: str  # Prometheus name on Triton's metrics port
    description: str
    kind: MetricKind
    buckets: tuple[float, ...] = ()  # a histogram's bucket upper bounds


class MetricSink(Protocol):
    """The seam's metric calls (:class:`~pdtrt.runtime.triton_io.Triton` has them)."""

    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> Any | None: ...
    def metric_family(self, spec: MetricSpec, label_sets: Sequence[Mapping[str, str]]
                      ) -> list[Any] | None: ...
    def increment(self, metric: Any, value: float) -> None: ...
    def set_gauge(self, metric: Any, value: float) -> None: ...


class Metrics:
    """Prometheus metrics of one model on Triton's metrics endpoint, keyed by short names.

    Every metric carries ``labels``; a key listed in ``by`` is one family with one metric per
    label set given there (e.g. one per endpoint), picked by the keyword labels of
    :meth:`add` / :meth:`set`. A backend without custom metrics makes every call a no-op.

    Each update is a round trip to the server through the stub. With ``flush_s`` > 0, counter
    increments are summed here and sent by a thread of their own every ``flush_s`` seconds
    (and by :meth:`flush`), so the endpoint lags by up to ``flush_s``; gauges are always set
    at once.

    A ``HISTOGRAM`` spec becomes Prometheus's histogram series as counters: ``<name>_bucket``
    with one ``le`` label per bucket bound and ``+Inf`` (cumulative), ``<name>_sum`` and
    ``<name>_count``; :meth:`observe` adds to them like any counter, so observations are
    batched too (at most buckets + 2 round trips per flush, whatever the request rate), and
    ``histogram_quantile`` reads them as it reads a native histogram. Not Triton 2.51's own
    ``MetricFamily.HISTOGRAM``: with it, the router's BLS calls stalled after a few hundred
    requests in tests/serve/test_e2e.py (stub threads waiting in ``exec``; not root-caused).
    """

    def __init__(self, triton: MetricSink, specs: Mapping[str, MetricSpec],
                 labels: Mapping[str, str],
                 by: Mapping[str, Sequence[Mapping[str, str]]] | None = None, *,
                 flush_s: float = 0.0) -> None:
        self._triton = triton
        by = by or {}
        self._histograms = {key: _Histogram.make(triton, spec, labels)
                            for key, spec in specs.items() if spec.kind is MetricKind.HISTOGRAM}
        self._metrics = {key: metric for key, spec in specs.items()
                         if key not in by and key not in self._histograms
                         if (metric := triton.metric(spec, labels)) is not None}
        self._labelled: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self._gauges: dict[int, float] = {}  # id(metric) -> the value last set
        self._set_lock = threading.Lock()
        self._flush_s = flush_s
        self._pending: dict[Any, float] = {}  # metric -> increments not sent yet
        self._pending_lock = threading.Lock()  # not _set_lock: that one is held across a set
        self._flusher: threading.Thread | None = None
        for key, sets in by.items():
            made = triton.metric_family(specs[key], [{**labels, **extra} for extra in sets]) or []
            for extra, metric in zip(sets, made, strict=False):
                self._labelled[key, _label_key(extra)] = metric

    def _find(self, key: str, labels: Mapping[str, str]) -> Any | None:
        if labels:
            return self._labelled.get((key, _label_key(labels)))
        return self._metrics.get(key)

    def add(self, key: str, value: float = 1.0, **labels: str) -> None:
        if (metric := self._find(key, labels)) is not None:
            self._add(metric, value)

    def _add(self, metric: Any, value: float) -> None:
        self._add_all(((metric, value),))

    def _add_all(self, adds: Sequence[tuple[Any, float]]) -> None:
        """Send the increments now (no ``flush_s``), or sum them for the flusher, under one
        taking of the lock whatever their number (an observation touches a dozen or more)."""
        if self._flush_s <= 0:
            for metric, amount in adds:
                self._triton.increment(metric, amount)
            return
        with self._pending_lock:
            pending = self._pending
            for metric, amount in adds:
                pending[metric] = pending.get(metric, 0.0) + amount
            self._start_flusher()

    def _start_flusher(self) -> None:
        if self._flusher is None:  # under _pending_lock
            self._flusher = threading.Thread(target=self._flush_every, daemon=True,
                                             name="pdtrt-metrics")
            self._flusher.start()

    def observe(self, key: str, value: float) -> None:
        """One observation of a histogram: its buckets from the first bound >= ``value`` on,
        its sum and its count."""
        hist = self._histograms.get(key)
        if hist is None:
            return
        # the buckets from the first bound >= value on (bounds ascending; none for a NaN)
        first = bisect_left(hist.bounds, value) if value == value else len(hist.bounds)
        adds = [(metric, 1.0) for _, metric in hist.buckets[first:]]
        adds += [(metric, amount) for metric, amount in ((hist.sum, value), (hist.count, 1.0))
                 if metric is not None]
        self._add_all(adds)

    def flush(self) -> None:
        """Send the summed increments now."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for metric, value in pending.items():
            self._triton.increment(metric, value)

    def _flush_every(self) -> None:
        while True:
            time.sleep(self._flush_s)
            self.flush()

    def set(self, key: str, value: float, **labels: str) -> None:
        """Set a gauge; a value it already has costs nothing (each set is a round trip to
        the server, and the engine models refresh their gauges on every request)."""
        if (metric := self._find(key, labels)) is None:
            return
        with self._set_lock:
            if self._gauges.get(id(metric)) != value:
                self._triton.set_gauge(metric, value)
                self._gauges[id(metric)] = value


@dataclass(frozen=True)
class _Histogram:
    """The counters of one histogram: ``(bound, bucket)`` pairs (``+Inf`` last), sum, count."""

    buckets: tuple[tuple[float, Any], ...]
    sum: Any
    count: Any
    bounds: tuple[float, ...] = ()  # the buckets' bounds, for bisect

    def __post_init__(self) -> None:
        bounds = tuple(bound for bound, _ in self.buckets)
        if list(bounds) != sorted(bounds):
            raise ValueError(f"histogram bucket bounds must ascend: {bounds}")
        object.__setattr__(self, "bounds", bounds)

    @classmethod
    def make(cls, triton: MetricSink, spec: MetricSpec, labels: Mapping[str, str]) -> _Histogram:
        bounds = (*spec.buckets, math.inf)
        made = triton.metric_family(
            MetricSpec(f"{spec.name}_bucket", f"{spec.description} (cumulative buckets)",
                       MetricKind.COUNTER),
            [{**labels, "le": "+Inf" if b == math.inf else f"{b:g}"} for b in bounds]) or []
        return cls(buckets=tuple(zip(bounds, made, strict=False)),
                   sum=triton.metric(MetricSpec(f"{spec.name}_sum", f"{spec.description} "
                                                "(sum)", MetricKind.COUNTER), labels),
                   count=triton.metric(MetricSpec(f"{spec.name}_count", f"{spec.description}"
                                                  " (count)", MetricKind.COUNTER), labels))


def _label_key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))
