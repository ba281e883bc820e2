"""Error bands: how far the model was off where it was validated, attached to each estimate.

``scripts/calibrate.py`` runs a leave-one-group-out validation on the measured sample (refit
the engine terms without one group -- one TP, one range of client counts, one runtime version
-- and predict that group) and stores each group's errors with the factors
(``validation:`` in ``pdtrt/data/perf_factors.yaml``). An estimate carries the band of its
nearest validated regime: the TP group nearest its TP and the client-range group of its
concurrency (open loop: of its decode batch), the worse of the two. The sample is one model on
one GPU in one precision; an estimate for anything else gets the band with a caveat saying so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.errors import CatalogError

__all__ = ["ErrorBand", "GroupError", "Validation", "nearest_band", "parse_validation"]


@dataclass(frozen=True, kw_only=True)
class GroupError:
    """Held-out errors of one group: ``by`` is ``tp``, ``clients`` or ``version``."""

    by: str
    value: str
    low: float
    high: float
    rows: int
    ttft_mape: float
    tpot_mape: float
    max_ratio: float

    def to_dict(self) -> dict[str, object]:
        return {"by": self.by, "value": self.value, "low": self.low, "high": self.high,
                "rows": self.rows, "ttft_mape": self.ttft_mape, "tpot_mape": self.tpot_mape,
                "max_ratio": self.max_ratio}


@dataclass(frozen=True, kw_only=True)
class Validation:
    gpu: str
    weights: str
    model: str
    groups: tuple[GroupError, ...]


@dataclass(frozen=True, kw_only=True)
class ErrorBand:
    """The expected error of an estimate: held-out MAPEs of its nearest validated regime."""

    regime: str
    ttft_mape: float
    tpot_mape: float
    max_ratio: float
    caveat: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"regime": self.regime, "ttft_mape": self.ttft_mape,
                "tpot_mape": self.tpot_mape, "max_ratio": self.max_ratio,
                "caveat": self.caveat}


def parse_validation(data: object, source: str) -> Validation:
    try:
        on = data["validated_on"]  # type: ignore[index]
        groups = tuple(GroupError(**g) for g in data["groups"])  # type: ignore[index]
        return Validation(gpu=on["gpu"], weights=on["weights"], model=on["model"],
                          groups=groups)
    except (KeyError, TypeError) as exc:
        raise CatalogError(f"{source}: malformed validation section ({exc})") from None


def _nearest(groups: list[GroupError], x: float) -> GroupError | None:
    if not groups:
        return None
    return min(groups, key=lambda g: 0.0 if g.low <= x <= g.high else
               min(abs(math.log(x / g.low)), abs(math.log(x / g.high))))


def nearest_band(v: Validation | None, *, tp: int, clients: float, gpu: str,
                 weights: str) -> ErrorBand | None:
    """The band of the validated regime nearest ``tp`` and ``clients`` (see module doc)."""
    if v is None:
        return None
    by_tp = _nearest([g for g in v.groups if g.by == "tp"], float(tp))
    by_clients = _nearest([g for g in v.groups if g.by == "clients"], max(clients, 1.0))
    picked = [g for g in (by_tp, by_clients) if g is not None]
    if not picked:
        return None
    regime = ", ".join(f"{g.by} {g.value}" for g in picked)
    caveat = None
    if gpu != v.gpu or weights != v.weights:
        caveat = (f"validated end to end on {v.model} {v.gpu} {v.weights} only; {gpu} "
                  f"{weights} rests on its kernel curves")
    return ErrorBand(regime=regime, ttft_mape=max(g.ttft_mape for g in picked),
                     tpot_mape=max(g.tpot_mape for g in picked),
                     max_ratio=max(g.max_ratio for g in picked), caveat=caveat)
