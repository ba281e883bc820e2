"""The hardware catalog: GPUs (and the host CPU of the reference target) as typed data.

The figures live in ``pdtrt/data/gpus.yaml`` -- datasheet peaks with their sources; efficiency
factors belong to the performance model, not here. Prices are defaults: a prices file (``{gpu:
usd_per_hour}``) overrides them. Names are looked up by key, alias or NVML name, case- and
punctuation-insensitively ("H100", "h100_sxm", "NVIDIA H100 80GB HBM3" -> ``h100-sxm``).
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdtrt.enums import DeviceKind
from pdtrt.errors import CatalogError
from pdtrt.suggest import did_you_mean

__all__ = ["GPU", "Catalog", "load_catalog", "load_prices"]


class GPU(BaseModel):
    """One accelerator type. Link bandwidths are per direction."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    name: str
    kind: DeviceKind
    aliases: tuple[str, ...] = ()
    nvml_names: tuple[str, ...] = ()
    compute_capability: str | None = Field(pattern=r"^\d+\.\d+$")
    bf16_dense_flops_per_s: float = Field(gt=0)
    fp8_dense_flops_per_s: float | None = Field(gt=0)
    memory_bytes: int = Field(gt=0)
    memory_bw_bytes_per_s: float = Field(gt=0)
    gpu_link: str
    gpu_link_bytes_per_s: float = Field(ge=0)
    host_link_bytes_per_s: float = Field(gt=0)
    tdp_w: float | None = None
    max_gpus_per_node: int = Field(ge=1)
    price_per_hour_usd: float | None = Field(ge=0)
    price_source: str

    @property
    def has_fp8(self) -> bool:
        return self.fp8_dense_flops_per_s is not None

    @property
    def sm_version(self) -> int | None:
        """Compute capability as TensorRT's SM number (``"8.9"`` -> 89)."""
        if self.compute_capability is None:
            return None
        major, minor = self.compute_capability.split(".")
        return int(major) * 10 + int(minor)


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gpus: list[GPU]


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Catalog:
    """An immutable set of :class:`GPU` entries with name resolution."""

    def __init__(self, gpus: list[GPU]) -> None:
        self._gpus = tuple(gpus)
        self._by_name: dict[str, GPU] = {}
        for gpu in self._gpus:
            for name in (gpu.key, *gpu.aliases, *gpu.nvml_names):
                self._by_name[_norm(name)] = gpu

    def __iter__(self):
        return iter(self._gpus)

    def __len__(self) -> int:
        return len(self._gpus)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(g.key for g in self._gpus)

    def find(self, name: str) -> GPU | None:
        return self._by_name.get(_norm(name))

    def get(self, name: str) -> GPU:
        """The entry for ``name``; raises :class:`CatalogError` with a suggestion if unknown."""
        gpu = self.find(name)
        if gpu is None:
            raise CatalogError(
                f"unknown GPU '{name}'{did_you_mean(name, self.keys)}",
                hint=f"known GPUs: {', '.join(self.keys)} (see `pdtrt gpus`)",
            )
        return gpu

    def from_nvml_name(self, nvml_name: str) -> GPU | None:
        """Map a name reported by NVML to its entry (exact NVML names only)."""
        for gpu in self._gpus:
            if nvml_name in gpu.nvml_names:
                return gpu
        return None

    def with_prices(self, prices: dict[str, float]) -> Catalog:
        """A copy whose prices are overridden by ``{gpu name: usd per hour}``."""
        by_key = {self.get(name).key: float(usd) for name, usd in prices.items()}
        return Catalog(
            [g.model_copy(update={"price_per_hour_usd": by_key[g.key],
                                  "price_source": "user prices file"})
             if g.key in by_key else g for g in self._gpus]
        )


def _parse_catalog(text: str, source: str) -> Catalog:
    try:
        return Catalog(_CatalogFile.model_validate(yaml.safe_load(text)).gpus)
    except (yaml.YAMLError, ValidationError) as exc:
        raise CatalogError(f"invalid GPU catalog {source}: {exc}") from None


@cache
def _builtin_catalog() -> Catalog:
    text = resources.files("pdtrt").joinpath("data/gpus.yaml").read_text(encoding="utf-8")
    return _parse_catalog(text, "pdtrt/data/gpus.yaml")


def load_prices(path: Path) -> dict[str, float]:
    """Read a prices file: a YAML/JSON mapping of GPU name -> USD per GPU-hour (>= 0)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(f"cannot read prices file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"prices file {path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CatalogError(
            f"prices file {path} must be a mapping of GPU name to USD per hour",
            hint="for example:  h100-sxm: 2.94\n  l40s: 1.58",
        )
    prices: dict[str, float] = {}
    for name, usd in data.items():
        if isinstance(usd, bool) or not isinstance(usd, int | float) or usd < 0:
            raise CatalogError(
                f"prices file {path}: price of '{name}' must be a number >= 0, got {usd!r}"
            )
        prices[str(name)] = float(usd)
    return prices


def load_catalog(prices: dict[str, float] | None = None) -> Catalog:
    """The built-in catalog, with ``prices`` (GPU name -> USD per hour) applied when given."""
    catalog = _builtin_catalog()
    return catalog.with_prices(prices) if prices else catalog
