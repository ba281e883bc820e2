#!/usr/bin/env python3
"""Engine-only TTFT of one prompt (no load, no harness terms) against the kernel tables' own
context-attention + GEMM sum, per GPU -- the table of benchmarks/engine_ttft.md.

    .venv/bin/python benchmarks/engine_ttft.py [--kernels ../shared/data/kernels]

pdtrt's number is :func:`pdtrt.perf.step.prefill_time_s` with the shipped TensorRT-LLM
factors (its kernel curves plus the fitted engine terms); the yardstick is
:func:`pdtrt.perf.kernel_sum.prefill_kernel_sum_s` on the raw tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import KVDType, WeightQuant  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import load_model_facts  # noqa: E402
from pdtrt.perf.factors import load_factors  # noqa: E402
from pdtrt.perf.hardware import Instance  # noqa: E402
from pdtrt.perf.kernel_sum import prefill_kernel_sum_s  # noqa: E402
from pdtrt.perf.step import prefill_chunk_work, prefill_time_s, step_time  # noqa: E402

PROMPTS = (512, 1024, 2048, 4096, 8192)
# (tables folder, catalog GPU, weights, KV cache): every GPU with tables, in the precisions
# they were measured in
CASES = (("h100_sxm", "h100-sxm", WeightQuant.FP8, KVDType.FP8),
         ("h100_sxm", "h100-sxm", WeightQuant.NONE, KVDType.BF16),
         ("h200_sxm", "h200-sxm", WeightQuant.FP8, KVDType.FP8),
         ("l40s", "l40s", WeightQuant.FP8, KVDType.FP8),
         ("l40s", "l40s", WeightQuant.NONE, KVDType.BF16),
         ("a100_sxm", "a100-sxm", WeightQuant.NONE, KVDType.BF16))
MODELS = ("meta-llama/Meta-Llama-3.1-8B", "Qwen/Qwen3-32B")


def rows(kernels: Path) -> list[tuple[str, list[tuple[float, float, float]]]]:
    """Per case: (label, [(kernel sum s, pdtrt engine TTFT s, pdtrt less its engine terms s)])."""
    f, catalog = load_factors(), load_catalog()
    out = []
    for name in MODELS:
        model = load_model_facts(name)
        for folder, gpu, weights, kv in CASES:
            inst = Instance(model=model, gpu=catalog.get(gpu), weights=weights, kv_dtype=kv)
            cells = []
            for isl in PROMPTS:
                t = step_time(prefill_chunk_work(isl), inst, f)
                cells.append((prefill_kernel_sum_s(kernels / folder, model, isl=isl,
                                                   weights=weights, kv_dtype=kv),
                              prefill_time_s(inst, f, isl), t.total_s - t.overhead_s))
            label = (f"{name.split('/')[1]} | {gpu} | "
                     f"{'fp8' if weights is WeightQuant.FP8 else 'bf16'} / {kv}")
            out.append((label, cells))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=ROOT.parent / "shared/data/kernels")
    args = ap.parse_args()
    head = " | ".join(f"{isl} tok" for isl in PROMPTS)
    print(f"| model | GPU | weights / KV | {head} |")
    print("|---|---|---|" + "---|" * len(PROMPTS))
    for label, cells in rows(args.kernels):
        body = " | ".join(f"{k * 1e3:.1f} / {p * 1e3:.1f} ({p / k - 1:+.0%})"
                          for k, p, _ in cells)
        print(f"| {label} | {body} |")
    print("\nwithout the fitted engine terms (step + eager launch overhead):")
    for label, cells in rows(args.kernels):
        print(f"| {label} | " + " | ".join(f"{c / k - 1:+.0%}" for k, _, c in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
