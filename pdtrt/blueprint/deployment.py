"""A resolved deployment: the validated spec plus what it refers to.

``load_deployment`` (:mod:`pdtrt.spec.load`) builds it once at the edge; later stages
(build, repo, serve, bench) take a :class:`Deployment` and never re-read files or re-check rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.enums import Phase
from pdtrt.facts.catalog import GPU
from pdtrt.facts.memory import MemoryFit
from pdtrt.facts.model import ModelFacts

__all__ = ["Deployment"]


@dataclass(frozen=True, kw_only=True)
class Deployment:
    spec: DeploymentSpec
    source: Path
    model: ModelFacts
    gpus: dict[Phase, GPU]
    fits: dict[Phase, MemoryFit]

    def price_per_hour_usd(self, phase: Phase) -> float | None:
        """Price of one GPU-hour of ``phase``'s pool: the spec's override, else the catalog's."""
        pool = self.spec.pool(phase)
        if pool.price_per_hour_usd is not None:
            return pool.price_per_hour_usd
        return self.gpus[phase].price_per_hour_usd

    def cost_per_hour_usd(self) -> float | None:
        """All GPUs of both pools per hour, or None when a price is unknown."""
        total = 0.0
        for phase in Phase:
            price = self.price_per_hour_usd(phase)
            if price is None:
                return None
            total += price * self.spec.pool(phase).num_gpus
        return total

    def to_dict(self) -> dict[str, object]:
        spec = self.spec
        return {
            "name": spec.name,
            "source": str(self.source),
            "target": str(spec.target),
            "model": spec.model.name,
            "num_params": self.model.num_params,
            "pools": {
                str(phase): {
                    "gpu": self.gpus[phase].key,
                    "tp": spec.pool(phase).tp,
                    "pp": spec.pool(phase).pp,
                    "instances": spec.pool(phase).instances,
                    "num_gpus": spec.pool(phase).num_gpus,
                    "weights": str(spec.weights(phase)),
                    "kv_cache_dtype": str(spec.kv_cache_dtype(phase)),
                    "price_per_hour_usd": self.price_per_hour_usd(phase),
                    "memory": self.fits[phase].to_dict(),
                }
                for phase in Phase
            },
            "cost_per_hour_usd": self.cost_per_hour_usd(),
        }
