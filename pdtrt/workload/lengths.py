"""Prompt and output length distributions, in tokens -- one type for bench, simulate and plan.

One syntax everywhere a length is given (``--isl`` / ``--osl`` of ``pdtrt bench`` and
``pdtrt simulate``; the spec's ``workload.isl`` / ``osl`` are the ``N`` form):

- ``N`` -- every request has N tokens (``fixed:N`` is accepted too);
- ``uniform:LOW:HIGH`` -- integers LOW..HIGH inclusive, equally likely;
- ``normal:MEAN:STD`` -- rounded normal draws, clipped to ``[1, ceil(MEAN + 4 STD)]``: a length
  cannot be zero, and a rare tail draw (p < 4e-5) cannot outgrow what engines were sized for.
  This clipping is the only one.

A distribution is not a sample: draws come from the caller's seeded ``numpy`` ``Generator``
(:func:`pdtrt.workload.request_mix.request_rng`), never from a global one. Every field means the
same for every kind: ``low``/``high`` bound the samples, ``mean``/``std`` describe the
distribution before rounding and clipping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdtrt.enums import LengthKind
from pdtrt.errors import WorkloadError

__all__ = ["LengthDist", "LengthKind", "parse_length"]

NORMAL_CLIP_STDS = 4.0


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """A length distribution in tokens; build it with :meth:`fixed`, :meth:`uniform`,
    :meth:`normal` or :func:`parse_length`."""

    kind: LengthKind
    low: int  # smallest possible sample
    high: int  # largest possible sample
    mean: float
    std: float

    @classmethod
    def fixed(cls, tokens: int) -> LengthDist:
        """Always ``tokens``; raises WorkloadError below 1."""
        if tokens < 1:
            raise WorkloadError(f"length {tokens}: must be >= 1 token")
        return cls(kind=LengthKind.FIXED, low=tokens, high=tokens, mean=float(tokens), std=0.0)

    @classmethod
    def uniform(cls, low: int, high: int) -> LengthDist:
        """Integers ``low..high`` inclusive; raises WorkloadError unless 1 <= low <= high."""
        if not 1 <= low <= high:
            raise WorkloadError(f"length uniform:{low}:{high}: need 1 <= LOW <= HIGH")
        n = high - low + 1
        return cls(kind=LengthKind.UNIFORM, low=low, high=high, mean=(low + high) / 2,
                   std=math.sqrt((n * n - 1) / 12))

    @classmethod
    def normal(cls, mean: float, std: float) -> LengthDist:
        """Rounded normal draws clipped to ``[1, ceil(mean + 4 std)]``; raises WorkloadError
        unless mean >= 1 and std >= 0."""
        if not (math.isfinite(mean) and math.isfinite(std) and mean >= 1 and std >= 0):
            raise WorkloadError(f"length normal:{mean:g}:{std:g}: need MEAN >= 1 and STD >= 0")
        return cls(kind=LengthKind.NORMAL, low=1,
                   high=math.ceil(mean + NORMAL_CLIP_STDS * std), mean=float(mean),
                   std=float(std))

    def sample(self, rng: np.random.Generator) -> int:
        """One length drawn with ``rng`` (no draw at all for a fixed length)."""
        if self.kind is LengthKind.FIXED:
            return self.low
        if self.kind is LengthKind.UNIFORM:
            return int(rng.integers(self.low, self.high + 1))
        return int(min(max(round(rng.normal(self.mean, self.std)), self.low), self.high))

    def __str__(self) -> str:
        """The syntax :func:`parse_length` reads back."""
        if self.kind is LengthKind.FIXED:
            return str(self.low)
        if self.kind is LengthKind.UNIFORM:
            return f"uniform:{self.low}:{self.high}"
        return f"normal:{self.mean:g}:{self.std:g}"


def _int(text: str, whole: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise WorkloadError(f"length '{whole}': '{text}' is not a whole number of tokens"
                            ) from None


def parse_length(text: str) -> LengthDist:
    """``"128"``, ``"fixed:128"``, ``"uniform:64:256"`` or ``"normal:128:32"``; raises
    WorkloadError naming the text and the forms it accepts."""
    parts = text.strip().split(":")
    kinds = {k.value: k for k in LengthKind}
    forms = "N, uniform:LOW:HIGH or normal:MEAN:STD"
    if len(parts) == 1 or (parts[0] == LengthKind.FIXED and len(parts) == 2):
        if not parts[-1].lstrip("-").isdigit():
            raise WorkloadError(f"length '{text}' is not {forms}")
        return LengthDist.fixed(int(parts[-1]))
    kind = kinds.get(parts[0])
    if kind is None or kind is LengthKind.FIXED or len(parts) != 3:
        raise WorkloadError(f"length '{text}' is not {forms}")
    if kind is LengthKind.UNIFORM:
        return LengthDist.uniform(_int(parts[1], text), _int(parts[2], text))
    try:
        mean, std = float(parts[1]), float(parts[2])
    except ValueError:
        raise WorkloadError(f"length '{text}' is not {forms}") from None
    return LengthDist.normal(mean, std)
