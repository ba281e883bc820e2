"""Kernel-measured efficiencies per GPU and dtype: what the step model reads instead of constants.

The curves are *derived* from NVIDIA's per-kernel TensorRT-LLM measurements (GEMM, context and
generation attention, all-reduce) by ``scripts/derive_kernel_factors.py``
(:mod:`pdtrt.perf.kernel_derive`) and shipped, with the sha256 of every source table, in
``pdtrt/data/kernel_factors.json``. Each efficiency is a fraction of a catalog datasheet peak
(:mod:`pdtrt.facts.catalog`); the peaks stay in the catalog, the fractions live here:

- ``gemm[dtype]``: achieved / dense peak FLOP/s of an ``M x K`` by ``K x N`` GEMM, on a log grid
  of ``M`` (tokens in the step), ``N`` and ``K`` (the per-rank weight shape). Small ``M`` is
  bandwidth-bound (the efficiency falls with ``M``), large ``M`` compute-bound.
- ``weight_stream_bw_eff[dtype]``: achieved / datasheet memory bandwidth of ``M = 1`` GEMMs on
  weights larger than any L2 -- the floor of a decode GEMM. The benchmark repeats one GEMM, so
  small weights sit in L2 (L40S: 96 MB) and look faster than a model whose layers each read new
  weights; the step model never lets a GEMM beat this floor.
- ``context_attention[kv dtype]``: achieved / dense peak FLOP/s (FP8 peak for an FP8 KV cache,
  whose context FMHA runs in FP8) of causal prefill attention, by prompt length and
  ``sequences x heads``.
- ``generation_attention[kv dtype]``: achieved / datasheet bandwidth of reading the KV cache in a
  decode step, by context length and ``sequences x KV heads`` (the step model caps it at the
  DRAM streaming rate for the same L2 reason: a KV that fits in L2 reads faster than 100%).
- ``allreduce[tp]``: seconds of one all-reduce by message bytes (the faster of TensorRT-LLM's
  custom all-reduce and NCCL at each size, as its AUTO strategy picks).

Lookups interpolate linearly in the efficiency and logarithmically in the coordinates, and clamp
at the grid's edges. A GPU without measurements borrows the curves of a measured GPU of the same
architecture (compute capability), applied to its own peaks; a dtype without measurements
borrows BF16's -- and :func:`kernel_notes` says so, so an estimate never hides it.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.errors import CatalogError
from pdtrt.facts.catalog import GPU

__all__ = ["FORMAT", "GpuKernels", "KernelFactors", "LogGrid", "gemm_dtype", "kernel_notes",
           "kv_attention_dtype", "load_kernel_factors", "parse_kernel_factors", "resolve",
           "scalar_fallback"]

FORMAT = "pdtrt-kernel-factors/1"
BUILTIN = "data/kernel_factors.json"


@dataclass(frozen=True, eq=False)
class LogGrid:
    """Values on a rectangular grid of ascending positive coordinates (row-major, last axis
    fastest), interpolated linearly in ``log2`` of each coordinate and clamped at the edges.
    Compared and hashed by identity, so step-time caches key on it cheaply."""

    axes: tuple[tuple[float, ...], ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        size = math.prod(len(a) for a in self.axes)
        if size != len(self.values) or any(list(a) != sorted(a) or a[0] <= 0
                                           for a in self.axes):
            raise CatalogError(f"kernel grid: {len(self.values)} values for axes of sizes "
                               f"{[len(a) for a in self.axes]} (or axes not ascending)")

    def __call__(self, *coords: float) -> float:
        corners: list[tuple[int, float]] = [(0, 1.0)]  # (flat index, weight)
        for axis, x in zip(self.axes, coords, strict=True):
            stride = len(axis)
            if x <= axis[0] or len(axis) == 1:
                lo, hi, w = 0, 0, 0.0
            elif x >= axis[-1]:
                lo = hi = len(axis) - 1
                w = 0.0
            else:
                hi = bisect.bisect_right(axis, x)
                lo = hi - 1
                w = math.log2(x / axis[lo]) / math.log2(axis[hi] / axis[lo])
            corners = [(i * stride + j, cw * ww) for i, cw in corners
                       for j, ww in ((lo, 1.0 - w), (hi, w)) if ww > 0.0]
        return sum(self.values[i] * w for i, w in corners)


@dataclass(frozen=True, kw_only=True)
class GpuKernels:
    """The derived curves of one GPU (see module doc); dict keys are the dtypes measured."""

    gpu: str
    source_dir: str
    runtime_version: str
    weight_stream_bw_eff: dict[str, float]
    gemm: dict[str, LogGrid]
    context_attention: dict[str, LogGrid]
    generation_attention: dict[str, LogGrid]
    allreduce: dict[int, LogGrid]

    def allreduce_s(self, tp: int, message_bytes: float) -> float:
        """Seconds of one all-reduce of ``message_bytes`` over ``tp`` GPUs (the nearest measured
        GPU count at or above ``tp``; beyond the largest message, at its bandwidth)."""
        counts = sorted(self.allreduce)
        n = next((c for c in counts if c >= tp), counts[-1])
        grid = self.allreduce[n]
        sizes = grid.axes[0]
        if message_bytes > sizes[-1]:
            return 2.0 ** grid.values[-1] * message_bytes / sizes[-1]
        return 2.0 ** grid(max(message_bytes, sizes[0]))


@dataclass(frozen=True, kw_only=True, eq=False)
class KernelFactors:
    """All GPUs' curves and where they came from (compared and hashed by identity)."""

    provenance: dict[str, object]
    gpus: dict[str, GpuKernels]
    compute_capability: dict[str, str]


def _grid(entry: dict, axes: tuple[str, ...], value: str, where: str) -> LogGrid:
    try:
        return LogGrid(tuple(tuple(float(v) for v in entry[a]) for a in axes),
                       tuple(float(v) for v in entry[value]))
    except (KeyError, TypeError) as exc:
        raise CatalogError(f"{where}: malformed kernel grid ({exc})") from None


def parse_kernel_factors(data: object, source: str) -> KernelFactors:
    """Typed curves from the JSON structure written by the derivation script."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CatalogError(f"{source}: not a {FORMAT} file")
    gpus: dict[str, GpuKernels] = {}
    arch: dict[str, str] = {}
    for key, g in data["gpus"].items():
        where = f"{source}: gpus.{key}"
        gpus[key] = GpuKernels(
            gpu=key, source_dir=g["source_dir"], runtime_version=g["runtime_version"],
            weight_stream_bw_eff={k: float(v) for k, v in g["weight_stream_bw_eff"].items()},
            gemm={d: _grid(e, ("m", "n", "k"), "eff", f"{where}.gemm.{d}")
                  for d, e in g["gemm"].items()},
            context_attention={d: _grid(e, ("tokens", "seq_heads"), "eff", where)
                               for d, e in g["context_attention"].items()},
            generation_attention={d: _grid(e, ("context", "seq_kv_heads"), "eff", where)
                                  for d, e in g["generation_attention"].items()},
            allreduce={int(n): LogGrid(((*map(float, e["message_bytes"]),),),
                                       tuple(math.log2(v) for v in e["latency_s"]))
                       for n, e in g["allreduce"].items()},
        )
        arch[key] = str(g["compute_capability"])
    return KernelFactors(provenance=data.get("provenance", {}), gpus=gpus,
                         compute_capability=arch)


@cache
def _builtin() -> KernelFactors:
    text = resources.files("pdtrt").joinpath(BUILTIN).read_text("utf-8")
    return parse_kernel_factors(json.loads(text), "pdtrt/" + BUILTIN)


def load_kernel_factors(path: Path | None = None) -> KernelFactors:
    """The built-in curves, or those of ``path``; raises :class:`CatalogError`."""
    if path is None:
        return _builtin()
    try:
        return parse_kernel_factors(json.loads(path.read_text(encoding="utf-8")), str(path))
    except (OSError, json.JSONDecodeError) as exc:
        raise CatalogError(f"cannot read kernel factors {path}: {exc}") from None


def scalar_fallback(kf: KernelFactors) -> dict[str, float]:
    """Scalar efficiencies for GPUs no curve covers: the median over the measured GPUs of the
    BF16 curves at a typical prefill (4096 tokens, 4096 x 4096 weights; 4096-token causal
    attention over 32 heads) and of their weight-streaming bandwidth."""
    gpus = list(kf.gpus.values())

    def median(values: list[float]) -> float:
        values = sorted(values)
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    return {
        "gemm_eff": round(median([g.gemm["bf16"](4096, 4096, 4096) for g in gpus]), 4),
        "attention_eff": round(median([g.context_attention["bf16"](4096, 32)
                                       for g in gpus]), 4),
        "bandwidth_eff": round(median([g.weight_stream_bw_eff["bf16"] for g in gpus]), 4),
    }


def gemm_dtype(weights: WeightQuant) -> str:
    """The GEMM table a weight precision runs on: FP8 weights on FP8 GEMMs, else BF16."""
    return "fp8" if weights is WeightQuant.FP8 else "bf16"


def kv_attention_dtype(kv: KVDType) -> str:
    return "fp8" if kv is KVDType.FP8 else "bf16"


def resolve(kf: KernelFactors, gpu: GPU) -> tuple[GpuKernels | None, str | None]:
    """The curves for ``gpu`` and, when they are not its own, a note saying whose they are."""
    if gpu.key in kf.gpus:
        return kf.gpus[gpu.key], None
    same = [k for k, cc in kf.compute_capability.items() if cc == gpu.compute_capability]
    if same:
        return kf.gpus[same[0]], (
            f"{gpu.key}: no kernel measurements; using {same[0]}'s efficiencies (same "
            f"architecture, sm {gpu.compute_capability}) on {gpu.key}'s own datasheet peaks")
    return None, (f"{gpu.key}: no kernel measurements for it or its architecture; using the "
                  "backend's scalar efficiency factors (fitted on H100)")


def kernel_notes(kf: KernelFactors, gpu: GPU, *, dtype: DType, weights: WeightQuant,
                 kv_dtype: KVDType) -> tuple[str, ...]:
    """Every place where an instance's step time uses curves measured for something else."""
    curves, note = resolve(kf, gpu)
    notes = [note] if note else []
    if curves is None:
        return tuple(notes)
    if weights not in (WeightQuant.NONE, WeightQuant.FP8):
        notes.append(f"{gpu.key}: no {weights} GEMM measurements; using BF16 GEMM efficiencies "
                     "(weight bytes still counted at their quantised size)")
    if dtype is DType.FP16:
        notes.append(f"{gpu.key}: FP16 uses the BF16 measurements (same tensor-core rate)")
    kv = kv_attention_dtype(kv_dtype)
    if kv not in curves.context_attention or kv not in curves.generation_attention:
        notes.append(f"{gpu.key}: no {kv_dtype} KV-cache attention measurements; using BF16's")
    return tuple(notes)
