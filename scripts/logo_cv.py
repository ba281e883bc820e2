#!/usr/bin/env python3
"""Leave-one-group-out by GPU x model x TP: held-out TTFT/TPOT error per group, before and after.

    .venv/bin/python scripts/logo_cv.py                      # both variants, 12 evaluations each
    .venv/bin/python scripts/logo_cv.py --evals 4 --json     # quick look, machine-readable

For every GPU x model x TP group of the measured sample (``pdtrt/data/calibration/``, a copy of
shared/data's), the TensorRT-LLM engine terms are refitted on the other groups and the
held-out group is predicted. Two variants of the model are compared with the same budget from
the same start (the shipped factors):

- ``before``: the shipped model, refitting ``step_overhead_s`` and ``eager_layer_overhead_s``;
- ``after``: plus one of issue 47's candidate terms (``--candidate``, :mod:`pdtrt.perf.step`),
  fitted beside them: ``tp_sync_layer_s`` (per-layer rank-sync cost of an eager step, times
  log2(tp)) or ``prefill_seq_overhead_s`` (CPU cost per prompt a step admits, any TP).

The harness terms (``closed_loop_burst``, ``startup_share``) and the sample's KV fraction stay at
their shipped values: they describe the benchmark, not TP, and refitting all five terms per
group costs more than a shared 2-core machine gives (``--all-terms`` refits them too).

Each group's line gives the held-out MAPE (the rows the refit never saw) and the in-sample MAPE
(the refit's own rows), so a change that buys in-sample error with held-out error shows. The
refits start from factors fitted on all rows (as ``scripts/calibrate.py``'s validation does),
so the held-out numbers are a little optimistic for both variants alike. Results and the
verdict (neither candidate is kept: in-sample better, held-out worse): benchmarks/logo_cv.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import ServingBackend  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import load_model_facts  # noqa: E402
from pdtrt.perf.calibrate import (  # noqa: E402
    KERNEL_FITTED,
    CalibrationFit,
    SampleDeployment,
    fit_factors,
    gpu_model_tp_groups,
    predict,
    read_rows,
)
from pdtrt.perf.factors import load_factors_file  # noqa: E402

DATA = ROOT / "pdtrt" / "data" / "calibration" / "measured_calibration.csv"
FACTORS = ROOT / "pdtrt" / "data" / "perf_factors.yaml"
ENGINE_TERMS = ("step_overhead_s", "eager_layer_overhead_s")
CANDIDATES = ("tp_sync_layer_s", "prefill_seq_overhead_s")
# Where a candidate term starts (the fit works on its logarithm, so not at 0).
CANDIDATE_START_S = 1e-5


def _metrics(fit: CalibrationFit) -> dict[str, float]:
    return {"ttft_mape": round(fit.ttft_mape, 4), "tpot_mape": round(fit.tpot_mape, 4),
            "max_ratio": round(fit.max_ratio, 3)}


def _fitted(variant: str, all_terms: bool, candidate: str) -> tuple[str, ...]:
    base = KERNEL_FITTED if all_terms else ENGINE_TERMS
    return base if variant == "before" else (*base, candidate)


def run_group(args: tuple[str, int, str, int, str, str, bool, str]) -> dict[str, object]:
    """Refit without one group and predict it: (variant, group index, ...) -> result row."""
    variant, index, model_name, evals, data, factors, all_terms, candidate = args
    rows = [r for r in read_rows(Path(data)) if r.backend is ServingBackend.TRTLLM]
    model, catalog = load_model_facts(model_name), load_catalog()
    by, value, _lo, _hi, member = gpu_model_tp_groups(rows, model_name)[index]
    shipped = load_factors_file(Path(factors))[ServingBackend.TRTLLM]
    start = shipped if variant == "before" else replace(shipped,
                                                        **{candidate: CANDIDATE_START_S})
    sample = SampleDeployment(kv_cache_fraction=_sample_kv_fraction(Path(factors)))
    rest = [r for r in rows if not member(r)]
    held = tuple(r for r in rows if member(r))
    refit = fit_factors(rest, model, catalog, backend=ServingBackend.TRTLLM, start=start,
                        max_evals=evals, fitted=_fitted(variant, all_terms, candidate),
                        sample=sample)
    preds = tuple(predict(r, model, catalog, refit.factors, refit.sample) for r in held)
    out = CalibrationFit(backend=ServingBackend.TRTLLM, factors=refit.factors, rows=held,
                         predicted_ms=preds, evaluations=refit.evaluations)
    return {"variant": variant, "group": value, "by": by, "rows": len(held),
            "held_out": _metrics(out), "in_sample": _metrics(refit),
            "candidate": candidate if variant == "after" else None,
            "candidate_s": getattr(refit.factors, candidate) if variant == "after" else 0.0,
            "eager_layer_overhead_s": refit.factors.eager_layer_overhead_s}


def _sample_kv_fraction(path: Path) -> float:
    import yaml
    entry = yaml.safe_load(path.read_text(encoding="utf-8"))["backends"]["trtllm"]
    return float(entry.get("sample", {}).get("kv_cache_fraction", 0.9))


def _table(results: list[dict]) -> str:
    lines = ["| held out | rows | variant | TTFT held-out | TPOT held-out | worst held-out | "
             "TTFT in-sample | TPOT in-sample | candidate term |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        h, i = r["held_out"], r["in_sample"]
        lines.append(f"| {r['group']} | {r['rows']} | {r['variant']} | {h['ttft_mape']:.1%} | "
                     f"{h['tpot_mape']:.1%} | {h['max_ratio']:.2f}x | {i['ttft_mape']:.1%} | "
                     f"{i['tpot_mape']:.1%} | {r['candidate_s'] * 1e6:.1f} us |")
    for variant in sorted({r["variant"] for r in results}, reverse=True):
        mine = [r for r in results if r["variant"] == variant]
        n = sum(r["rows"] for r in mine)
        ttft = sum(r["held_out"]["ttft_mape"] * r["rows"] for r in mine) / n
        tpot = sum(r["held_out"]["tpot_mape"] * r["rows"] for r in mine) / n
        lines.append(f"| all groups (row-weighted) | {n} | {variant} | {ttft:.1%} | {tpot:.1%} "
                     f"| | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--factors", type=Path, default=FACTORS)
    ap.add_argument("--model", default="Qwen/Qwen3-32B")
    ap.add_argument("--evals", type=int, default=12, help="optimiser evaluations per refit")
    ap.add_argument("--candidate", choices=CANDIDATES, default=CANDIDATES[0],
                    help="the term 'after' adds")
    ap.add_argument("--all-terms", action="store_true",
                    help="also refit the harness terms and the sample's KV fraction")
    ap.add_argument("--variant", action="append", choices=["after", "before"],
                    help="default: both")
    ap.add_argument("--group", type=int, action="append",
                    help="only these group indexes (0-based, by GPU then TP)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    rows = [r for r in read_rows(args.data) if r.backend is ServingBackend.TRTLLM]
    groups = gpu_model_tp_groups(rows, args.model)
    indexes = args.group if args.group is not None else list(range(len(groups)))
    if any(not 0 <= i < len(groups) for i in indexes):
        ap.error(f"--group must be in 0..{len(groups) - 1}")
    tasks = [(v, i, args.model, args.evals, str(args.data), str(args.factors),
              args.all_terms, args.candidate)
             for i in indexes for v in (args.variant or ["before", "after"])]
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        results = list(pool.map(run_group, tasks))
    if args.json:
        print(json.dumps({"evals": args.evals, "all_terms": args.all_terms,
                          "results": results}, indent=2))
    else:
        print(_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
