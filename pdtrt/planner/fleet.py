"""The GPUs a user already owns: what they cost, how many of each type a plan may use, and
which owned cards a configuration puts on which phase.

``pdtrt plan --have l40s:8,h100-sxm:2 --power-price 0.15``: an owned card costs its board
power (the catalog's ``tdp_w``, the datasheet's maximum board power) at ``--power-price`` USD
per kWh -- electricity only, no host, cooling or depreciation -- and only cards beyond the
owned ones are rented at the catalog's (or ``--prices``') rate. (``--max-gpus type:count``
caps the cards of a type, owned and rented together: :class:`pdtrt.planner.space.SearchBounds`.)

A configuration uses owned cards where they save the most: each GPU type's owned cards go to
its pools in turn (decode first, then prefill -- the same type costs the same on either
phase), the rest of each pool is rented. :meth:`Fleet.use` says which; the planner ranks by
:meth:`FleetUse.cost_per_hour_usd` instead of rent alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pdtrt.enums import ServingMode
from pdtrt.errors import PdtrtError
from pdtrt.facts.catalog import GPU, Catalog
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.hardware import Instance

__all__ = ["Fleet", "FleetUse", "PoolUse", "parse_counts"]


def parse_counts(text: str, catalog: Catalog, *, flag: str) -> dict[str, int]:
    """``"l40s:8,h100-sxm:2"`` -> ``{"l40s": 8, "h100-sxm": 2}`` by catalog key. Raises
    PdtrtError for a malformed item, a count below 1 or a type named twice; CatalogError
    (with "did you mean") for an unknown GPU type."""
    out: dict[str, int] = {}
    items = [i.strip() for i in text.split(",") if i.strip()]
    if not items:
        raise PdtrtError(f"{flag} names no GPU", hint=f"e.g. {flag} l40s:8,h100-sxm:2")
    for item in items:
        name, sep, count = item.partition(":")
        if not sep or not name.strip():
            raise PdtrtError(f"{flag}: '{item}' is not TYPE:COUNT",
                             hint=f"e.g. {flag} l40s:8,h100-sxm:2")
        try:
            n = int(count)
        except ValueError:
            raise PdtrtError(f"{flag}: the count of '{name}' must be a whole number, got "
                             f"'{count}'") from None
        if n < 1:
            raise PdtrtError(f"{flag}: the count of '{name}' must be at least 1, got {n}")
        key = catalog.get(name.strip()).key
        if key in out:
            raise PdtrtError(f"{flag}: {key} is named twice")
        out[key] = n
    return out


@dataclass(frozen=True, kw_only=True)
class PoolUse:
    """One pool's cards: ``owned`` of the user's and ``rented`` more, of one GPU type;
    ``phase`` is prefill, decode or aggregated."""

    phase: str
    gpu: str
    owned: int
    rented: int
    usd_per_hour: float

    @property
    def usd_per_gpu_hour(self) -> float:
        """The pool's blended price of one GPU-hour (what its written spec says)."""
        return self.usd_per_hour / (self.owned + self.rented)

    def to_dict(self) -> dict[str, object]:
        return {"phase": self.phase, "gpu": self.gpu, "owned": self.owned,
                "rented": self.rented, "usd_per_hour": round(self.usd_per_hour, 4)}

    def describe(self) -> str:
        parts = [f"{self.owned} owned"] if self.owned else []
        parts += [f"{self.rented} rented"] if self.rented else []
        return f"{self.phase} {self.owned + self.rented}x {self.gpu} ({' + '.join(parts)})"


@dataclass(frozen=True, kw_only=True)
class FleetUse:
    """Which owned and rented cards a configuration runs on, and what they cost per hour."""

    pools: tuple[PoolUse, ...]

    @property
    def cost_per_hour_usd(self) -> float:
        return sum(p.usd_per_hour for p in self.pools)

    @property
    def owned(self) -> int:
        return sum(p.owned for p in self.pools)

    def pool(self, phase: str) -> PoolUse:
        return next(p for p in self.pools if p.phase == phase)

    def usd_per_gpu_hour(self, phase: str) -> float:
        """``phase``'s blended price of one GPU-hour over its GPU types (a mixed pool has
        several): what its written spec says."""
        mine = [p for p in self.pools if p.phase == phase]
        return sum(p.usd_per_hour for p in mine) / sum(p.owned + p.rented for p in mine)

    def describe(self) -> str:
        return "; ".join(p.describe() for p in self.pools)

    def to_dict(self) -> dict[str, object]:
        return {"pools": [p.to_dict() for p in self.pools],
                "cost_per_hour_usd": round(self.cost_per_hour_usd, 4)}


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """Owned cards by GPU key and the electricity price (module doc)."""

    owned: dict[str, int] = field(default_factory=dict)
    power_price_usd_per_kwh: float = 0.0

    def power_usd_per_hour(self, gpu: GPU) -> float:
        """Electricity of one owned card at full board power, USD per hour."""
        assert gpu.tdp_w is not None  # checked by Fleet.check
        return gpu.tdp_w / 1e3 * self.power_price_usd_per_kwh

    def check(self, catalog: Catalog) -> None:
        """Raises PdtrtError for an owned type whose board power the catalog lacks."""
        for key in self.owned:
            if catalog.get(key).tdp_w is None:
                raise PdtrtError(f"--have {key}: the catalog has no board power for it, so "
                                 "its electricity cannot be priced",
                                 hint="rent it instead (--gpus) or add tdp_w to the catalog")

    def _pools(self, config: ServingConfig, extra_decode: Sequence[tuple[Instance, int]]
               ) -> list[tuple[str, Instance, int]]:
        if config.mode is ServingMode.AGGREGATED or config.decode is None:
            return [("aggregated", config.prefill, config.prefill_instances)]
        return [("decode", config.decode, config.decode_instances),
                *(("decode", inst, n) for inst, n in extra_decode),
                ("prefill", config.prefill, config.prefill_instances)]

    def use(self, config: ServingConfig,
            extra_decode: Sequence[tuple[Instance, int]] = ()) -> FleetUse:
        """The owned cards each pool of ``config`` gets (decode first, its ``extra_decode``
        replicas of other types -- a mixed pool -- included), the rest rented."""
        left = dict(self.owned)
        out = []
        for phase, inst, n in self._pools(config, extra_decode):
            cards = inst.num_gpus * n
            owned = min(cards, left.get(inst.gpu.key, 0))
            left[inst.gpu.key] = left.get(inst.gpu.key, 0) - owned
            rent = inst.gpu.price_per_hour_usd or 0.0
            power = self.power_usd_per_hour(inst.gpu) if owned else 0.0
            out.append(PoolUse(phase=phase, gpu=inst.gpu.key, owned=owned,
                               rented=cards - owned,
                               usd_per_hour=owned * power + (cards - owned) * rent))
        return FleetUse(pools=tuple(out[-1:] + out[:-1]))  # prefill first, as in labels
