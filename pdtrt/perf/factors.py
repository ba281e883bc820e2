"""Efficiency factors: how far real kernels and schedulers fall short of datasheet peaks.

The catalog holds datasheet peaks (:mod:`pdtrt.facts.catalog`); this module holds the fractions
of them a serving runtime achieves, one set per :class:`ServingBackend`, stored with their
provenance in ``pdtrt/data/perf_factors.yaml``; nothing here is tuned by hand. Two sources:

- **kernel curves** (:mod:`pdtrt.perf.kernels`): per-GPU, per-dtype efficiencies derived from
  measured TensorRT-LLM kernels; a backend entry names them with ``kernels: builtin`` (or a
  path). With curves, the step model uses them for every GPU they cover and the scalar
  ``gemm_eff`` / ``attention_eff`` / ``bandwidth_eff`` only for GPUs they do not.
- **engine terms** (scheduler step, eager launches) fitted by :mod:`pdtrt.perf.calibrate`
  (``scripts/calibrate.py``) on measured serving runs, with the curves fixed.

A user re-fits the engine terms on their own runs with the same script and passes the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from pdtrt.enums import ServingBackend
from pdtrt.errors import CatalogError
from pdtrt.perf.kernels import KernelFactors, load_kernel_factors
from pdtrt.perf.validation import Validation, parse_validation

__all__ = ["DEFAULT_FACTORS", "EfficiencyFactors", "load_factors", "load_factors_file"]


@dataclass(frozen=True, kw_only=True)
class EfficiencyFactors:
    """Fractions of peak (0-1] and fixed costs (seconds) of one serving runtime.

    Scalar efficiencies (used for GPUs the kernel curves do not cover, or with no curves):

    - ``gemm_eff``: achieved / peak dense FLOP/s of the linear layers.
    - ``attention_eff``: achieved / peak FLOP/s of the attention score and value products.
    - ``bandwidth_eff``: achieved / peak memory bandwidth of weight and KV reads.
    - ``allreduce_latency_s``: fixed cost of one tensor-parallel all-reduce (two per layer);
      with curves, only pipeline-stage hand-offs use it.

    Engine terms (always used):

    - ``step_overhead_s``: fixed CPU cost of one engine iteration (scheduling, batch assembly,
      sampling, response hand-off), paid by every step.
    - ``eager_layer_overhead_s``: per-layer kernel-launch cost of a step that runs without CUDA
      graphs (steps carrying prefill tokens, decode batches above the captured sizes).
    - ``tp_sync_layer_s``: per-layer cost of keeping ``tp`` ranks in step in an eager step
      (launch skew the two all-reduces wait out), times log2(tp); 0 at TP 1. A candidate term
      of issue 47, rejected by ``scripts/logo_cv.py`` (in-sample better, held-out worse:
      benchmarks/logo_cv.md); 0 in the shipped factors, kept so the script can re-judge it.
    - ``prefill_seq_overhead_s``: CPU cost per prompt a step admits (KV block allocation,
      request set-up), whatever the TP; issue 47's second candidate, rejected likewise; 0 in
      the shipped factors.

    Outside the engine (not GPU time; 0 in the shipped factors, user-settable):

    - ``request_overhead_s``: the client/HTTP overhead a benchmark harness adds to every
      request's first token (tokenisation, HTTP, queue hand-offs). Engine predictions leave it
      out; ``pdtrt estimate --client-overhead-ms`` reports it separately.
    - ``startup_share``: share of a closed-loop benchmark's requests that see the start-up
      queue (all clients start at once); 0 for steady state. Describes a harness, not hardware.
    - ``closed_loop_burst``: prompts that reach the engine together in a closed-loop benchmark
      of this runtime (clients that started together stay in step); 1 = independent. Used by
      closed-loop estimates only (:class:`pdtrt.perf.estimate.Load`); describes a harness.

    ``kernels``: the per-GPU curves (:mod:`pdtrt.perf.kernels`), or None for the scalar model;
    ``validation``: the held-out errors of these factors (:mod:`pdtrt.perf.validation`).
    """

    gemm_eff: float
    attention_eff: float
    bandwidth_eff: float
    step_overhead_s: float
    allreduce_latency_s: float
    request_overhead_s: float = 0.0
    startup_share: float = 0.0
    eager_layer_overhead_s: float = 0.0
    closed_loop_burst: float = 1.0
    tp_sync_layer_s: float = 0.0
    prefill_seq_overhead_s: float = 0.0
    kernels: KernelFactors | None = field(default=None, repr=False)
    validation: Validation | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("gemm_eff", "attention_eff", "bandwidth_eff"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise CatalogError(f"efficiency factor {name} must be in (0, 1], got {value}")
        for name in ("step_overhead_s", "allreduce_latency_s", "request_overhead_s",
                     "eager_layer_overhead_s", "tp_sync_layer_s", "prefill_seq_overhead_s"):
            if getattr(self, name) < 0:
                raise CatalogError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.closed_loop_burst < 1:
            raise CatalogError(f"closed_loop_burst must be >= 1, got {self.closed_loop_burst}")
        if not 0 <= self.startup_share <= 1:
            raise CatalogError(f"startup_share must be in [0, 1], got {self.startup_share}")

    def to_dict(self) -> dict[str, float]:
        """The numbers (not the curves), as written in a factors file."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("kernels", "validation")}


# Before any fit: aiconfigurator's modelling hints (0.8 of peak bandwidth, ~3 us per
# memory-bound kernel, ~10 us point-to-point latency) and a typical 60% GEMM efficiency.
DEFAULT_FACTORS = EfficiencyFactors(
    gemm_eff=0.6, attention_eff=0.4, bandwidth_eff=0.8, step_overhead_s=3e-4,
    allreduce_latency_s=1e-5,
)


def _kernels(entry: dict, source: str, base: Path | None) -> KernelFactors | None:
    ref = entry.get("kernels")
    if ref is None:
        return None
    if ref == "builtin":
        return load_kernel_factors()
    if base is None:
        raise CatalogError(f"{source}: kernels must be 'builtin' in a built-in file")
    return load_kernel_factors(base / str(ref))


def _parse(data: object, source: str,
           base: Path | None = None) -> dict[ServingBackend, EfficiencyFactors]:
    if not isinstance(data, dict) or not isinstance(data.get("backends"), dict):
        raise CatalogError(f"{source}: expected a mapping with a 'backends' section")
    out: dict[ServingBackend, EfficiencyFactors] = {}
    names = set(EfficiencyFactors.__dataclass_fields__) - {"kernels", "validation"}
    for name, entry in data["backends"].items():
        try:
            backend = ServingBackend(name)
        except ValueError:
            raise CatalogError(f"{source}: unknown backend '{name}'; known: "
                               f"{', '.join(b.value for b in ServingBackend)}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("factors"), dict):
            raise CatalogError(f"{source}: backends.{name} needs a 'factors' mapping")
        factors = entry["factors"]
        unknown = set(factors) - names
        if unknown:
            raise CatalogError(f"{source}: backends.{name}: unknown factors {sorted(unknown)}")
        try:
            validation = (parse_validation(entry["validation"], source)
                          if "validation" in entry else None)
            out[backend] = EfficiencyFactors(**{k: float(v) for k, v in factors.items()},
                                             kernels=_kernels(entry, source, base),
                                             validation=validation)
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
        return _parse(yaml.safe_load(path.read_text(encoding="utf-8")), str(path),
                      path.parent)
    except OSError as exc:
        raise CatalogError(f"cannot read factors file {path}: {exc.strerror}") from None


def load_factors(backend: ServingBackend = ServingBackend.TRTLLM,
                 path: Path | None = None) -> EfficiencyFactors:
    """The fitted factors of ``backend`` (built-in file unless ``path``); defaults if unfitted."""
    table = load_factors_file(path) if path else _builtin()
    return table.get(backend, DEFAULT_FACTORS)
