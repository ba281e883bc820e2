"""The server's own account of a benchmark run: the router's per-request histograms.

The router observes, for every request that succeeded, where its time went -- queue, prefill,
KV transfer, decode, TTFT, TPOT, end-to-end -- and its token counts, as Prometheus histograms
(``pdtrt_request_*``: ``_bucket{le}`` / ``_sum`` / ``_count`` on Triton's metrics port; the
families and their definitions are :mod:`pdtrt.runtime.router.timeline`). ``pdtrt bench
--metrics-url`` scrapes that endpoint when the measured requests start and again when they
have ended, and the difference is the run's server-side breakdown: count, mean and p50 / p90 /
p99 per family, the quantiles read from the buckets as Prometheus's ``histogram_quantile``
does (linear within a bucket, so as exact as the buckets are fine).

A family is recognised by its prefix, not by a list of names, so the bench needs no import of
the router and a family added there shows up here. Label sets other than ``le`` (several
router instances, several models) are summed. The router sends its counters every 0.1 s
(``METRICS_FLUSH_S`` in ``pdtrt/runtime/router/metrics.py``); the probe waits
:data:`SETTLE_S` before each scrape so the warm-up's observations land before the first one
and the run's last ones before the second.
"""

from __future__ import annotations

import math
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pdtrt.errors import BenchError

__all__ = ["PREFIX", "SETTLE_S", "FamilyStats", "Histogram", "MetricsProbe", "ServerBreakdown",
           "breakdown", "histograms", "parse_exposition"]

PREFIX = "pdtrt_request_"
SETTLE_S = 0.4  # > 3 router flush periods (0.1 s)
# the order of a request's life, for display; a family not named here follows, by name
_ORDER = ("queue", "prefill", "kv_transfer", "decode", "ttft", "tpot", "e2e", "input_tokens",
          "output_tokens")

# name{labels} value [timestamp]  (the Prometheus text exposition format, version 0.0.4)
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, frozenset[tuple[str, str]]]


def parse_exposition(text: str) -> dict[Sample, float]:
    """Every sample of a scrape: (name, labels) -> value. Comments and malformed lines are
    skipped (a scrape holds other exporters' metrics this module does not judge)."""
    out: dict[Sample, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = frozenset(_LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = value
    return out


@dataclass(frozen=True)
class Histogram:
    """One histogram family, summed over its label sets: cumulative bucket counts by upper
    bound (``+Inf`` last), the sum and the count of observations."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def minus(self, before: Histogram | None) -> Histogram:
        if before is None:
            return self
        old = dict(before.buckets)
        return Histogram(tuple((le, n - old.get(le, 0.0)) for le, n in self.buckets),
                         self.sum - before.sum, self.count - before.count)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """Prometheus's ``histogram_quantile``: the bucket holding rank ``q * count``, linear
        within it (from 0 for the first bucket); in the ``+Inf`` bucket, the highest finite
        bound."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower
                inside = cumulative - below
                return lower + (le - lower) * ((rank - below) / inside if inside > 0 else 1.0)
            lower, below = le, cumulative
        return lower


def histograms(samples: Mapping[Sample, float], prefix: str = PREFIX) -> dict[str, Histogram]:
    """The histogram families named ``prefix...`` in a parsed scrape."""
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if not name.startswith(prefix):
            continue
        if name.endswith("_bucket"):
            le = dict(labels).get("le")
            if le is None:
                continue
            family = buckets.setdefault(name[: -len("_bucket")], {})
            bound = float(le)  # "+Inf" parses
            family[bound] = family.get(bound, 0.0) + value
        elif name.endswith("_sum"):
            sums[name[: -len("_sum")]] = sums.get(name[: -len("_sum")], 0.0) + value
        elif name.endswith("_count"):
            counts[name[: -len("_count")]] = counts.get(name[: -len("_count")], 0.0) + value
    out = {}
    for family, by_le in buckets.items():
        if math.inf not in by_le and family in counts:
            by_le[math.inf] = counts[family]
        out[family] = Histogram(tuple(sorted(by_le.items())), sums.get(family, 0.0),
                                counts.get(family, by_le.get(math.inf, 0.0)))
    return out


@dataclass(frozen=True)
class FamilyStats:
    """One family over the run: observations, mean, p50 / p90 / p99 (seconds or tokens)."""

    family: str
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @property
    def unit(self) -> str:
        return "seconds" if self.family.endswith("_seconds") else "tokens"

    @property
    def label(self) -> str:
        """``queue``, ``kv_transfer``, ``input_tokens``...: the family without prefix/unit."""
        name = self.family.removeprefix(PREFIX)
        return name.removesuffix("_seconds")

    def to_dict(self) -> dict[str, object]:
        return {"family": self.family, "unit": self.unit, "count": self.count,
                "mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class ServerBreakdown:
    """The router's histograms over one run; ``note`` says why there are none (no
    ``--metrics-url``, a scrape that failed, a model that does not pass through the router)."""

    url: str | None
    families: tuple[FamilyStats, ...] = ()
    note: str | None = None

    def get(self, label: str) -> FamilyStats | None:
        return next((f for f in self.families if f.label == label), None)

    def to_dict(self) -> dict[str, object]:
        return {"metrics_url": self.url, "note": self.note,
                "families": [f.to_dict() for f in self.families]}


def breakdown(before: Mapping[str, Histogram], after: Mapping[str, Histogram], *,
              url: str | None = None) -> ServerBreakdown:
    """The run's observations: ``after - before`` per family (families that saw nothing
    left out; none at all is said in ``note``)."""
    def rank(family: str) -> tuple[int, str]:
        label = family.removeprefix(PREFIX).removesuffix("_seconds")
        return (_ORDER.index(label) if label in _ORDER else len(_ORDER), family)

    stats = []
    for family in sorted(after, key=rank):
        h = after[family].minus(before.get(family))
        if h.count <= 0:
            continue
        stats.append(FamilyStats(family, round(h.count), h.mean, h.quantile(0.5),
                                 h.quantile(0.9), h.quantile(0.99)))
    note = None if stats else (
        "the scrape saw no router observation during the run (the model does not pass "
        "through pdtrt's router, or every request failed)")
    return ServerBreakdown(url, tuple(stats), note)


def _fetch(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return response.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BenchError(f"cannot scrape {url}: {reason}",
                         hint="--metrics-url is Triton's metrics endpoint, e.g. "
                         "http://HOST:8002/metrics (`pdtrt serve` prints its port)") from None


class MetricsProbe:
    """Scrapes ``url`` around a run: :meth:`start` before the measured requests, :meth:`stop`
    after them. A failed scrape does not fail the benchmark; its breakdown says why."""

    def __init__(self, url: str, *, timeout_s: float = 5.0, settle_s: float = SETTLE_S,
                 fetch: Callable[[str, float], str] = _fetch,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._settle_s = settle_s
        self._fetch = fetch
        self._sleep = sleep
        self._before: dict[str, Histogram] | None = None
        self._error: str | None = None

    def check(self) -> None:
        """Raise :class:`BenchError` now if the endpoint cannot be scraped (before any run)."""
        self._fetch(self.url, self._timeout_s)

    def _scrape(self) -> dict[str, Histogram]:
        self._sleep(self._settle_s)
        return histograms(parse_exposition(self._fetch(self.url, self._timeout_s)))

    def start(self) -> None:
        self._before, self._error = None, None
        try:
            self._before = self._scrape()
        except BenchError as exc:
            self._error = exc.message

    def stop(self) -> ServerBreakdown:
        if self._before is None:
            return ServerBreakdown(self.url, note=self._error or "no scrape before the run")
        try:
            after = self._scrape()
        except BenchError as exc:
            return ServerBreakdown(self.url, note=exc.message)
        return breakdown(self._before, after, url=self.url)
