"""Deriving the kernel curves (:mod:`pdtrt.perf.kernels`) from the measured per-kernel tables.

Input: a directory with one folder per GPU (``h100_sxm/``, ``l40s/``, ...) holding the gzipped
CSV tables of ``shared/data/kernels`` (NVIDIA ``aiconfigurator-core`` 0.12.0, measured with
TensorRT-LLM; ``latency`` in ms per call). Output: the JSON structure of
``pdtrt/data/kernel_factors.json``, deterministic (no dates; numbers to 4 significant digits),
so re-running the derivation on the same tables reproduces the shipped file byte for byte.

How each curve is made (efficiencies are fractions of the *catalog's* datasheet peaks, which
are recorded beside them, so a catalog change shows up as a mismatch):

- GEMM: ``eff = 2 M N K / (latency x dense peak of the dtype)`` on the grid of powers of two
  (``M`` 1..16384, ``N``/``K`` 128..16384 and 65536), one measurement per cell; the one
  unmeasured cell (``N = K = 65536``) is the mean of its two neighbours. Tables used:
  ``bfloat16`` and ``fp8`` (per-tensor scaled); ``fp8_block`` and the A100's weight-only /
  SmoothQuant tables are not read.
- weight-streaming bandwidth: median of ``bytes / (latency x bandwidth)`` over ``M = 1`` GEMMs
  whose weights exceed 2^27 elements (larger than any L2), per dtype.
- context attention: rows with ``head_dim`` 128, no sliding window, 4-8 query heads per KV
  head (the dense Llama/Qwen range); ``eff = 4 b heads head_dim isl(isl+1)/2 / (latency x
  peak)`` (BF16 peak for a BF16 KV cache, FP8 peak for FP8 attention over an FP8 cache); the
  median per (``isl``, ``b x heads`` rounded to a power of two).
- generation attention: the same row filter, BF16 query; ``eff = b ctx 2 kv_heads head_dim
  bytes / (latency x bandwidth)`` with ``ctx = isl + step``; the median per (``ctx``,
  ``b x kv_heads`` rounded to a power of two).
- Cells of the attention grids that were never measured (long contexts at large batches did
  not fit on the GPU) take the nearest measured cell along the ``b x heads`` axis.
- all-reduce: per GPU count and message size (BF16 elements x 2 bytes), the faster of
  TensorRT-LLM's custom all-reduce and NCCL's ``all_reduce``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from pdtrt.facts.catalog import GPU, Catalog
from pdtrt.perf.kernels import FORMAT

__all__ = ["COMMAND", "ORIGIN", "TABLES", "derive", "dump_json"]

ORIGIN = ("per-kernel times measured with TensorRT-LLM by NVIDIA, published in the PyPI "
          "package aiconfigurator-core 0.12.0 (Apache-2.0), converted to gzipped CSV in "
          "shared/data/kernels (columns unchanged)")
COMMAND = "python scripts/derive_kernel_factors.py"

TABLES = ("gemm_perf", "context_attention_perf", "generation_attention_perf", "nccl_perf",
          "custom_allreduce_perf")
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
M_GRID = tuple(2 ** i for i in range(15))  # 1 .. 16384
NK_GRID = tuple(2 ** i for i in range(7, 15)) + (65536,)
STREAM_MIN_ELEMENTS = 2 ** 27
GQA_RANGE = (4, 8)
HEAD_DIM = 128


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}") if x else 0.0


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with gzip.open(path, "rt", newline="") as fh:
        yield from csv.DictReader(fh)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pow2(x: float) -> int:
    return 2 ** round(math.log2(x))


def _gemm(folder: Path, gpu: GPU) -> tuple[dict, dict]:
    lat: dict[tuple[str, int, int, int], float] = {}
    for r in _rows(folder / "gemm_perf.csv.gz"):
        dt = GEMM_DTYPES.get(r["gemm_dtype"])
        if dt:
            lat[(dt, int(r["m"]), int(r["n"]), int(r["k"]))] = float(r["latency"]) * 1e-3
    peaks = {"bf16": gpu.bf16_dense_flops_per_s, "fp8": gpu.fp8_dense_flops_per_s}
    tables, stream = {}, {}
    for dt in sorted({k[0] for k in lat}):
        ms = [m for m in M_GRID if (dt, m, 4096, 4096) in lat]
        eff = {}
        for m in ms:
            for n in NK_GRID:
                for k in NK_GRID:
                    t = lat.get((dt, m, n, k))
                    if t is not None:
                        eff[(m, n, k)] = 2.0 * m * n * k / (t * peaks[dt])
            hole, big = (m, NK_GRID[-1], NK_GRID[-1]), NK_GRID[-2]
            if hole not in eff:
                eff[hole] = (eff[(m, NK_GRID[-1], big)] + eff[(m, big, NK_GRID[-1])]) / 2
        wbytes = 1 if dt == "fp8" else 2
        stream[dt] = _sig(statistics.median(
            (n * k * wbytes + 2 * (n + k)) / (t * gpu.memory_bw_bytes_per_s)
            for (d, m, n, k), t in lat.items() if d == dt and m == 1
            and n * k >= STREAM_MIN_ELEMENTS))
        tables[dt] = {"m": ms, "n": list(NK_GRID), "k": list(NK_GRID),
                      "eff": [_sig(eff[(m, n, k)]) for m in ms for n in NK_GRID
                              for k in NK_GRID]}
    return tables, stream


def _fill_grid(cells: dict[tuple[int, int], list[float]], xs: list[int],
               ys: list[int]) -> list[float]:
    """Medians on the grid; a missing cell takes the nearest measured one along ``ys``."""
    out = []
    for x in xs:
        measured = {y: statistics.median(cells[(x, y)]) for y in ys if (x, y) in cells}
        for y in ys:
            near = min(measured, key=lambda v: (abs(math.log2(v / y)), v))
            out.append(_sig(measured[near]))
    return out


def _attention(folder: Path, gpu: GPU, *, table: str) -> dict:
    context = table == "context_attention_perf"
    cells: dict[str, dict[tuple[int, int], list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in _rows(folder / f"{table}.csv.gz"):
        heads, kv_heads = int(r["num_heads"]), int(r["num_key_value_heads"])
        if (int(r["head_dim"]) != HEAD_DIM or r["window_size"] != "0"
                or not GQA_RANGE[0] <= heads // kv_heads <= GQA_RANGE[1]
                or heads % kv_heads):
            continue
        attn, kv = r["attn_dtype"], r["kv_cache_dtype"]
        if context:
            key = {("bfloat16", "bfloat16"): "bf16", ("fp8", "fp8"): "fp8"}.get((attn, kv))
        else:
            key = {"bfloat16": "bf16", "fp8": "fp8"}.get(kv) if attn == "bfloat16" else None
        if key is None:
            continue
        b, isl, t = int(r["batch_size"]), int(r["isl"]), float(r["latency"]) * 1e-3
        if context:
            if isl < 16 or isl & (isl - 1):
                continue
            peak = gpu.bf16_dense_flops_per_s if key == "bf16" else gpu.fp8_dense_flops_per_s
            eff = 4.0 * b * heads * HEAD_DIM * isl * (isl + 1) / 2 / (t * peak)
            cells[key][(isl, _pow2(b * heads))].append(eff)
        else:
            ctx = isl + int(r["step"])
            kv_bytes = b * ctx * 2 * kv_heads * HEAD_DIM * (1 if key == "fp8" else 2)
            cells[key][(ctx, _pow2(b * kv_heads))].append(
                kv_bytes / (t * gpu.memory_bw_bytes_per_s))
    names = ("tokens", "seq_heads") if context else ("context", "seq_kv_heads")
    out = {}
    for key in sorted(cells):
        xs = sorted({x for x, _ in cells[key]})
        ys = sorted({y for _, y in cells[key]})
        out[key] = {"relative_to": ("bf16_dense_flops_per_s" if key == "bf16"
                                    else "fp8_dense_flops_per_s") if context
                    else "memory_bw_bytes_per_s",
                    names[0]: xs, names[1]: ys, "eff": _fill_grid(cells[key], xs, ys)}
    return out


def _allreduce(folder: Path) -> dict:
    best: dict[int, dict[int, float]] = defaultdict(dict)
    sources = [("custom_allreduce_perf", lambda r: r["allreduce_dtype"] == "bfloat16"),
               ("nccl_perf", lambda r: r["op_name"] == "all_reduce"
                and r["nccl_dtype"] == "half")]
    for table, keep in sources:
        for r in _rows(folder / f"{table}.csv.gz"):
            if keep(r):
                n, size = int(r["num_gpus"]), int(r["message_size"]) * 2
                t = float(r["latency"]) * 1e-3
                best[n][size] = min(best[n].get(size, math.inf), t)
    return {str(n): {"message_bytes": sorted(best[n]),
                     "latency_s": [_sig(best[n][s]) for s in sorted(best[n])]}
            for n in sorted(best)}


def _first(path: Path, column: str) -> str:
    return next(_rows(path))[column]


def derive(kernels_dir: Path, catalog: Catalog, *, command: str = COMMAND,
           origin: str = ORIGIN) -> dict:
    """The kernel-factors structure for every GPU folder under ``kernels_dir`` (see module
    doc). Raises :class:`~pdtrt.errors.CatalogError` for a folder the catalog does not know."""
    files: dict[str, dict[str, object]] = {}
    gpus: dict[str, object] = {}
    for folder in sorted(p for p in kernels_dir.iterdir() if p.is_dir()):
        gpu = catalog.get(folder.name)
        for table in TABLES:
            path = folder / f"{table}.csv.gz"
            files[f"{folder.name}/{path.name}"] = {
                "sha256": _sha256(path), "version": _first(path, "version"),
                "device": _first(path, "device")}
        gemm, stream = _gemm(folder, gpu)
        gpus[gpu.key] = {
            "source_dir": folder.name,
            "device": _first(folder / "gemm_perf.csv.gz", "device"),
            "runtime_version": _first(folder / "gemm_perf.csv.gz", "version"),
            "compute_capability": gpu.compute_capability,
            "peaks": {"bf16_dense_flops_per_s": gpu.bf16_dense_flops_per_s,
                      "fp8_dense_flops_per_s": gpu.fp8_dense_flops_per_s,
                      "memory_bw_bytes_per_s": gpu.memory_bw_bytes_per_s},
            "weight_stream_bw_eff": stream,
            "gemm": gemm,
            "context_attention": _attention(folder, gpu, table="context_attention_perf"),
            "generation_attention": _attention(folder, gpu,
                                               table="generation_attention_perf"),
            "allreduce": _allreduce(folder),
        }
    return {
        "format": FORMAT,
        "provenance": {
            "origin": origin,
            "script": "scripts/derive_kernel_factors.py",
            "command": command,
            "method": "pdtrt/perf/kernel_derive.py (module docstring)",
            "files": files,
        },
        "gpus": gpus,
    }


def dump_json(data: object, indent: int = 0) -> str:
    """Deterministic JSON with one line per list (diffable, compact)."""
    pad = " " * (indent + 1)
    if isinstance(data, dict):
        if not data:
            return "{}"
        items = [f"{pad}{_scalar(k)}: {dump_json(v, indent + 1)}" for k, v in data.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(data, list):
        return "[" + ", ".join(_scalar(v) for v in data) + "]"
    return _scalar(data)


def _scalar(v: object) -> str:
    return json.dumps(v)
