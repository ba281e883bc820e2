"""Input/output length distributions of synthetic benchmark requests, in tokens.

``fixed:N`` (or just ``N``), ``uniform:LOW:HIGH`` (inclusive), ``normal:MEAN:STD``. Normal
samples are rounded and floored at 1 token (a length cannot be zero); the floor is the only
clipping and is documented in docs/bench.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdtrt.enums import LengthKind
from pdtrt.errors import BenchError

__all__ = ["LengthDist", "LengthKind", "parse_length"]


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    kind: LengthKind
    a: float  # fixed: the length; uniform: low; normal: mean
    b: float = 0.0  # uniform: high; normal: standard deviation

    def sample(self, rng: np.random.Generator) -> int:
        if self.kind is LengthKind.FIXED:
            return int(self.a)
        if self.kind is LengthKind.UNIFORM:
            return int(rng.integers(int(self.a), int(self.b) + 1))
        return max(1, int(round(rng.normal(self.a, self.b))))

    @property
    def mean(self) -> float:
        return (self.a + self.b) / 2 if self.kind is LengthKind.UNIFORM else self.a

    def __str__(self) -> str:
        if self.kind is LengthKind.FIXED:
            return f"fixed:{int(self.a)}"
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def parse_length(text: str) -> LengthDist:
    """``"128"``, ``"fixed:128"``, ``"uniform:64:256"`` or ``"normal:128:32"``."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1 or (parts[0] == "fixed" and len(parts) == 2):
            n = int(parts[-1])
            if n < 1:
                raise BenchError(f"length '{text}': must be >= 1 token")
            return LengthDist(kind=LengthKind.FIXED, a=n)
        kind = LengthKind(parts[0])
        if len(parts) != 3 or kind is LengthKind.FIXED:
            raise ValueError
        a, b = float(parts[1]), float(parts[2])
    except ValueError:
        raise BenchError(f"length '{text}' is not N, fixed:N, uniform:LOW:HIGH or "
                         "normal:MEAN:STD") from None
    if kind is LengthKind.UNIFORM and not (1 <= a <= b):
        raise BenchError(f"length '{text}': need 1 <= LOW <= HIGH, got {a:g} and {b:g}")
    if kind is LengthKind.NORMAL and not (a >= 1 and b >= 0):
        raise BenchError(f"length '{text}': need MEAN >= 1 and STD >= 0")
    return LengthDist(kind=kind, a=a, b=b)
