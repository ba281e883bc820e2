"""A prompt's prefill as the measured kernel tables alone time it: the yardstick of the
engine-only TTFT check (benchmarks/engine_ttft.md).

The tables of ``shared/data/kernels`` (:mod:`pdtrt.perf.kernel_derive` says where they come
from) give per-call latencies of dense GEMMs and of context attention. For one prompt of
``isl`` tokens on one rank the sum is::

    layers * [t_gemm(isl, (d_q + 2 d_kv)/tp, h) + t_gemm(isl, h, d_q/tp)
              + t_gemm(isl, 2 i/tp, h) + t_gemm(isl, h, i/tp) + t_ctx(isl, heads/tp)]
    + t_gemm_bf16(1, V/tp, h)                                        (the first token's logits)

with each latency read off its table, interpolated linearly in the logarithms of the
coordinates and of the latency between the measured shapes that bracket it. No pdtrt
efficiency curve, DRAM floor, elementwise or overhead term enters: what pdtrt's engine-only
TTFT adds beyond this sum is its model of everything the kernel benchmarks do not measure.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pdtrt.enums import KVDType, WeightQuant
from pdtrt.errors import CatalogError
from pdtrt.facts.model import ModelFacts

__all__ = ["KernelTables", "prefill_kernel_sum_s"]

_GEMM_DTYPE = {WeightQuant.FP8: "fp8"}  # anything else: bfloat16
_ATTN_DTYPE = {KVDType.FP8: ("fp8", "fp8")}  # (attention, KV cache); else bfloat16 twice


def _bracket(axis: Sequence[float], x: float) -> tuple[float, float]:
    i = min(max(bisect.bisect_left(axis, x), 1), len(axis) - 1)
    return axis[i - 1], axis[i]


def _log_interp(table: dict[tuple[float, ...], float], axes: Sequence[Sequence[float]],
                coords: Sequence[float]) -> float:
    """Multilinear interpolation of ``log(latency)`` in ``log(coords)`` (extrapolating
    linearly beyond the edges) over the measured points that bracket ``coords``."""
    corners: list[tuple[tuple[float, ...], float]] = [((), 1.0)]
    for axis, x in zip(axes, coords, strict=True):
        lo, hi = _bracket(axis, x)
        w = 0.0 if hi == lo else (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo))
        corners = [(key + (v,), wt * (w if v == hi else 1.0 - w))
                   for key, wt in corners for v in ((lo, hi) if hi != lo else (lo,))]
    try:
        return math.exp(sum(wt * math.log(table[key]) for key, wt in corners))
    except KeyError as exc:
        raise CatalogError(f"kernel table has no measurement at {exc.args[0]}") from None


@dataclass(frozen=True)
class KernelTables:
    """The GEMM and context-attention latencies (seconds) of one GPU's folder."""

    gemm: dict[str, dict[tuple[float, ...], float]]
    context: dict[tuple[str, str, int, int, int], dict[tuple[float, ...], float]]
    gemm_axes: dict[str, list[list[float]]]  # per dtype: the measured m, n and k, sorted

    @classmethod
    @cache
    def load(cls, folder: Path) -> KernelTables:
        gemm: dict[str, dict[tuple[float, ...], float]] = {}
        with gzip.open(folder / "gemm_perf.csv.gz", "rt", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                gemm.setdefault(r["gemm_dtype"], {})[
                    (float(r["m"]), float(r["n"]), float(r["k"]))] = float(r["latency"]) / 1e3
        context: dict[tuple[str, str, int, int, int], dict[tuple[float, ...], float]] = {}
        with gzip.open(folder / "context_attention_perf.csv.gz", "rt", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                if r["batch_size"] != "1" or r["window_size"] != "0":
                    continue
                key = (r["attn_dtype"], r["kv_cache_dtype"], int(r["num_heads"]),
                       int(r["num_key_value_heads"]), int(r["head_dim"]))
                context.setdefault(key, {})[(float(r["isl"]),)] = float(r["latency"]) / 1e3
        axes = {dtype: [sorted({key[i] for key in table}) for i in range(3)]
                for dtype, table in gemm.items()}
        return cls(gemm=gemm, context=context, gemm_axes=axes)

    def gemm_s(self, dtype: str, m: int, n: int, k: int) -> float:
        return _log_interp(self.gemm[dtype], self.gemm_axes[dtype], (m, n, k))

    def context_s(self, attn: str, kv: str, heads: int, kv_heads: int, head_dim: int,
                  isl: int) -> float:
        table = self.context.get((attn, kv, heads, kv_heads, head_dim))
        if table is None:
            raise CatalogError(f"no context-attention table for {attn}/{kv}, {heads} heads, "
                               f"{kv_heads} KV heads, head_dim {head_dim}")
        return _log_interp(table, [sorted(k[0] for k in table)], (isl,))


def prefill_kernel_sum_s(folder: Path, model: ModelFacts, *, isl: int,
                         weights: WeightQuant = WeightQuant.NONE,
                         kv_dtype: KVDType = KVDType.BF16, tp: int = 1) -> float:
    """The kernel tables' own time for one prompt of ``isl`` tokens (module doc)."""
    t = KernelTables.load(folder)
    dt = _GEMM_DTYPE.get(weights, "bfloat16")
    attn, kv = _ATTN_DTYPE.get(kv_dtype, ("bfloat16", "bfloat16"))
    h, q, kvd = model.hidden_size, model.q_dim // tp, model.kv_dim // tp
    ffn = model.intermediate_size // tp
    layer = (t.gemm_s(dt, isl, q + 2 * kvd, h) + t.gemm_s(dt, isl, h, q)
             + t.gemm_s(dt, isl, 2 * ffn, h) + t.gemm_s(dt, isl, h, ffn)
             + t.context_s(attn, kv, model.num_heads // tp, max(model.num_kv_heads // tp, 1),
                           model.head_dim, isl))
    return model.num_layers * layer + t.gemm_s("bfloat16", 1, model.vocab_size // tp, h)
