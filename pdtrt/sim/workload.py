"""Simulated workloads: arrival processes and prompt/output length distributions.

Arrivals: Poisson (exponential gaps, rate ``r``), constant (gaps ``1/r``), a trace file (CSV
with ``arrival_s,isl,osl``), or closed loop (``concurrency`` clients that all start at t = 0
and send their next request when the last one ends). Lengths: fixed, uniform within
``mean * (1 +- spread)``, or normal with coefficient of variation ``spread`` (clipped to >= 1
token, and to ``mean * (1 + 4 spread)``). All randomness comes from the injected
:class:`numpy.random.Generator`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from pdtrt.enums import LengthKind
from pdtrt.errors import PdtrtError

__all__ = ["ArrivalKind", "LengthDist", "LengthKind", "RequestSpec", "Workload",
           "generate_requests", "read_trace"]


class ArrivalKind(StrEnum):
    POISSON = "poisson"
    CONSTANT = "constant"
    TRACE = "trace"
    CLOSED = "closed"


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    kind: LengthKind = LengthKind.FIXED
    mean: int
    spread: float = 0.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind is LengthKind.FIXED or self.spread == 0:
            return np.full(n, self.mean, dtype=np.int64)
        if self.kind is LengthKind.UNIFORM:
            lo, hi = self.mean * (1 - self.spread), self.mean * (1 + self.spread)
            values = rng.uniform(lo, hi, n)
        else:
            values = rng.normal(self.mean, self.mean * self.spread, n)
        # clipped to [1, max] so a rare tail draw cannot outgrow the KV sized for `max`
        return np.clip(np.rint(values), 1, self.max).astype(np.int64)

    @property
    def max(self) -> int:
        if self.kind is LengthKind.FIXED or self.spread == 0:
            return self.mean
        k = 1.0 if self.kind is LengthKind.UNIFORM else 4.0
        return int(np.ceil(self.mean * (1 + k * self.spread)))


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    arrival_s: float
    isl: int
    osl: int


@dataclass(frozen=True, kw_only=True)
class Workload:
    arrivals: ArrivalKind
    isl: LengthDist
    osl: LengthDist
    rate_per_s: float | None = None
    concurrency: int | None = None
    trace: tuple[RequestSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.arrivals in (ArrivalKind.POISSON, ArrivalKind.CONSTANT) and not self.rate_per_s:
            raise PdtrtError(f"{self.arrivals} arrivals need a request rate",
                             hint="pass --rate R (requests per second)")
        if self.arrivals is ArrivalKind.CLOSED and not self.concurrency:
            raise PdtrtError("closed-loop arrivals need a concurrency",
                             hint="pass --concurrency C")
        if self.arrivals is ArrivalKind.TRACE and not self.trace:
            raise PdtrtError("trace arrivals need a non-empty trace file",
                             hint="pass --trace FILE (CSV: arrival_s,isl,osl)")


def generate_requests(w: Workload, rng: np.random.Generator, num_requests: int
                      ) -> list[RequestSpec]:
    """The requests of one run, in arrival order (closed loop: arrival 0, re-timed later)."""
    if w.arrivals is ArrivalKind.TRACE:
        return sorted(w.trace[:num_requests] if num_requests else w.trace,
                      key=lambda r: r.arrival_s)
    isl, osl = w.isl.sample(rng, num_requests), w.osl.sample(rng, num_requests)
    if w.arrivals is ArrivalKind.POISSON:
        assert w.rate_per_s is not None
        times = np.cumsum(rng.exponential(1.0 / w.rate_per_s, num_requests))
    elif w.arrivals is ArrivalKind.CONSTANT:
        assert w.rate_per_s is not None
        times = np.arange(1, num_requests + 1) / w.rate_per_s
    else:
        times = np.zeros(num_requests)
    return [RequestSpec(arrival_s=float(t), isl=int(i), osl=int(o))
            for t, i, o in zip(times, isl, osl, strict=True)]


def read_trace(path: Path) -> tuple[RequestSpec, ...]:
    """A trace CSV with a header naming ``arrival_s``, ``isl`` and ``osl``."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise PdtrtError(f"cannot read trace {path}: {exc.strerror}") from None
    out = []
    for i, row in enumerate(rows, start=2):
        try:
            spec = RequestSpec(arrival_s=float(row["arrival_s"]), isl=int(row["isl"]),
                               osl=int(row["osl"]))
        except (KeyError, ValueError, TypeError):
            raise PdtrtError(f"{path}:{i}: a trace row needs numeric arrival_s, isl, osl",
                             hint="header: arrival_s,isl,osl") from None
        if spec.isl < 1 or spec.osl < 1 or spec.arrival_s < 0:
            raise PdtrtError(f"{path}:{i}: isl and osl must be >= 1 and arrival_s >= 0")
        out.append(spec)
    return tuple(out)
