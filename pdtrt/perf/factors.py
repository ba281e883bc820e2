"""Efficiency factors: how far real kernels and schedulers fall short of datasheet peaks.

The catalog holds datasheet peaks (:mod:`pdtrt.facts.catalog`); this module holds the *fitted*
fractions of them that a serving runtime achieves, one set per :class:`ServingBackend`. They
are fitted by :mod:`pdtrt.perf.calibrate` (``scripts/calibrate.py``) on measured serving runs
and stored with their provenance in ``pdtrt/data/perf_factors.yaml``; nothing here is tuned by
hand. A user re-fits them on their own runs with the same script and passes the file.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from pdtrt.enums import ServingBackend
from pdtrt.errors import CatalogError

__all__ = ["DEFAULT_FACTORS", "EfficiencyFactors", "load_factors", "load_factors_file"]


@dataclass(frozen=True, kw_only=True)
class EfficiencyFactors:
    """Fractions of peak (0-1] and fixed costs (seconds) of one serving runtime.

    - ``gemm_eff``: achieved / peak dense FLOP/s of the linear layers.
    - ``attention_eff``: achieved / peak FLOP/s of the attention score and value products.
    - ``bandwidth_eff``: achieved / peak memory bandwidth of weight and KV reads.
    - ``step_overhead_s``: fixed cost of one engine iteration (scheduling, launches, sampling).
    - ``allreduce_latency_s``: fixed cost of one tensor-parallel all-reduce (two per layer).
    - ``request_overhead_s``: fixed latency added to every request's first token outside the
      engine (HTTP, tokenisation, queue hand-offs); it does not occupy the GPU.
    - ``startup_share``: share of a closed-loop benchmark's requests that see the start-up
      queue (all clients start at once); 0 for steady state. Describes the benchmark harness
      the data came from, not the hardware.
    """

    gemm_eff: float
    attention_eff: float
    bandwidth_eff: float
    step_overhead_s: float
    allreduce_latency_s: float
    request_overhead_s: float = 0.0
    startup_share: float = 0.0

    def __post_init__(self) -> None:
        for name in ("gemm_eff", "attention_eff", "bandwidth_eff"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise CatalogError(f"efficiency factor {name} must be in (0, 1], got {value}")
        for name in ("step_overhead_s", "allreduce_latency_s", "request_overhead_s"):
            if getattr(self, name) < 0:
                raise CatalogError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 <= self.startup_share <= 1:
            raise CatalogError(f"startup_share must be in [0, 1], got {self.startup_share}")

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


# Before any fit: aiconfigurator's modelling hints (0.8 of peak bandwidth, ~3 us per
# memory-bound kernel, ~10 us point-to-point latency) and a typical 60% GEMM efficiency.
DEFAULT_FACTORS = EfficiencyFactors(
    gemm_eff=0.6, attention_eff=0.4, bandwidth_eff=0.8, step_overhead_s=3e-4,
    allreduce_latency_s=1e-5,
)


def _parse(data: object, source: str) -> dict[ServingBackend, EfficiencyFactors]:
    if not isinstance(data, dict) or not isinstance(data.get("backends"), dict):
        raise CatalogError(f"{source}: expected a mapping with a 'backends' section")
    out: dict[ServingBackend, EfficiencyFactors] = {}
    fields = set(EfficiencyFactors.__dataclass_fields__)
    for name, entry in data["backends"].items():
        try:
            backend = ServingBackend(name)
        except ValueError:
            raise CatalogError(f"{source}: unknown backend '{name}'; known: "
                               f"{', '.join(b.value for b in ServingBackend)}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("factors"), dict):
            raise CatalogError(f"{source}: backends.{name} needs a 'factors' mapping")
        factors = entry["factors"]
        unknown = set(factors) - fields
        if unknown:
            raise CatalogError(f"{source}: backends.{name}: unknown factors {sorted(unknown)}")
        try:
            out[backend] = EfficiencyFactors(**{k: float(v) for k, v in factors.items()})
        except TypeError as exc:
            raise CatalogError(f"{source}: backends.{name}: {exc}") from None
    return out


@cache
def _builtin() -> dict[ServingBackend, EfficiencyFactors]:
    text = resources.files("pdtrt").joinpath("data/perf_factors.yaml").read_text("utf-8")
    return _parse(yaml.safe_load(text), "pdtrt/data/perf_factors.yaml")


def load_factors_file(path: Path) -> dict[ServingBackend, EfficiencyFactors]:
    """Factors from a file written by ``scripts/calibrate.py``; raises :class:`CatalogError`."""
    try:
        return _parse(yaml.safe_load(path.read_text(encoding="utf-8")), str(path))
    except OSError as exc:
        raise CatalogError(f"cannot read factors file {path}: {exc.strerror}") from None


def load_factors(backend: ServingBackend = ServingBackend.TRTLLM,
                 path: Path | None = None) -> EfficiencyFactors:
    """The fitted factors of ``backend`` (built-in file unless ``path``); defaults if unfitted."""
    table = load_factors_file(path) if path else _builtin()
    return table.get(backend, DEFAULT_FACTORS)
