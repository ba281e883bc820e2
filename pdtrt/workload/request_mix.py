"""Request *i* of a workload: its prompt and output lengths, the same in every run of a seed.

Request ``i`` is drawn from its own generator, seeded with ``(seed, 0, i)``
(:func:`request_rng`): prompt length first, then output length. So request ``i`` is the same
whatever the arrival process, the concurrency, the rate of a sweep or the model under test, and
``pdtrt bench`` and ``pdtrt simulate`` give request ``i`` the same lengths for one ``--seed``.
With a trace, request ``i`` is entry ``i mod n`` (cycled): its ``isl`` (else its prompt's size
as counted by the caller), its ``osl`` (else a draw from the output distribution).

This module says how long each request is; what its prompt text is (bench's tokenizer or
synthetic words) and when it is sent (:mod:`pdtrt.workload.arrivals`) are decided elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.trace import TraceEntry

__all__ = ["REQUEST_STREAM", "RequestDraw", "RequestMix", "request_rng", "word_count"]

REQUEST_STREAM = 0  # second seed word of request generators (arrivals: 1)


def request_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of request ``index`` of a run seeded with ``seed``."""
    return np.random.default_rng([seed, REQUEST_STREAM, index])


def word_count(text: str) -> int:
    """Whitespace-separated words: pdtrt's token count when no tokenizer is at hand."""
    return len(text.split())


@dataclass(frozen=True, kw_only=True)
class RequestDraw:
    """What request ``index`` is: lengths in tokens, and a trace entry's prompt and time."""

    index: int
    isl: int
    osl: int
    prompt: str | None = None
    arrival_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class RequestMix:
    """Length distributions (or a trace) and the seed that turn an index into a request."""

    isl: LengthDist
    osl: LengthDist
    seed: int = 0
    trace: tuple[TraceEntry, ...] = ()

    def draw(self, index: int, rng: np.random.Generator | None = None, *,
             count: Callable[[str], int] = word_count) -> RequestDraw:
        """Request ``index``, drawn with ``rng`` (default :func:`request_rng`); pass the
        request's generator to keep drawing from it (e.g. prompt words) after the lengths.
        ``count`` sizes a trace prompt that has no ``isl``."""
        rng = rng if rng is not None else request_rng(self.seed, index)
        if not self.trace:
            isl = self.isl.sample(rng)
            return RequestDraw(index=index, isl=isl, osl=self.osl.sample(rng))
        entry = self.trace[index % len(self.trace)]
        assert entry.isl is not None or entry.prompt is not None  # read_trace checks it
        isl = entry.isl if entry.isl is not None else count(entry.prompt or "")
        osl = entry.osl if entry.osl is not None else self.osl.sample(rng)
        return RequestDraw(index=index, isl=isl, osl=osl, prompt=entry.prompt,
                           arrival_s=entry.arrival_s)

    @property
    def max_isl(self) -> int:
        """The longest prompt this mix can produce (engines and KV caches are sized for it)."""
        if not self.trace:
            return self.isl.high
        return max(e.isl if e.isl is not None else word_count(e.prompt or "")
                   for e in self.trace)

    @property
    def max_osl(self) -> int:
        if not self.trace:
            return self.osl.high
        return max(e.osl if e.osl is not None else self.osl.high for e in self.trace)
