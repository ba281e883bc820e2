#!/usr/bin/env python3
"""Fit pdtrt's engine terms on measured serving runs, validate them, write them with provenance.

    .venv/bin/python scripts/calibrate.py --backend trtllm       # built-in data -> built-in file
    .venv/bin/python scripts/calibrate.py --data my_runs.csv -o my_factors.yaml

TensorRT-LLM: the efficiencies are the kernel curves (``pdtrt/data/kernel_factors.json``, from
``scripts/derive_kernel_factors.py``); only the engine terms the kernels cannot measure and the
harness's closed-loop burst are fitted, then a leave-one-group-out validation (one TP, one range
of client counts, one runtime version held out at a time) is stored beside them and printed.
vLLM / SGLang (no kernel curves): the scalar factors are fitted as before. Writes the factors
file (``pdtrt/data/perf_factors.yaml`` by default; entries of backends not refitted are kept)
and the per-row residuals (``docs/calibration-residuals.csv``), and prints the tables of
docs/design/planning.md. The model of the calibration data is Qwen3-32B; the GPU is each row's
``system``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
from dataclasses import replace
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import ServingBackend  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import load_model_facts  # noqa: E402
from pdtrt.perf.calibrate import (  # noqa: E402
    KERNEL_FITTED,
    SCALAR_FITTED,
    START,
    CalibrationFit,
    fit_factors,
    leave_one_group_out,
    predict,
    read_rows,
)
from pdtrt.perf.factors import load_factors_file  # noqa: E402
from pdtrt.perf.kernels import load_kernel_factors, scalar_fallback  # noqa: E402
from pdtrt.yamlio import write_atomic  # noqa: E402

DATA = ROOT / "pdtrt" / "data" / "calibration" / "measured_calibration.csv"
ORIGIN = ("measured sample shipped in NVIDIA aiconfigurator-core 0.12.0 (Qwen3-32B on H100 SXM, "
          "aggregated, closed loop)")


def _row_line(name: str, s: dict) -> str:
    return (f"| {name} | {s['rows']} | {s['ttft_mape']:.1%} | {s['tpot_mape']:.1%} | "
            f"{s['ttft_ape_median']:.1%} / {s['ttft_ape_p90']:.1%} | "
            f"{s['tpot_ape_median']:.1%} / {s['tpot_ape_p90']:.1%} | {s['max_ratio']:.2f}x |")


def _kernel_fit(rows, model, catalog, old, args) -> tuple[dict, CalibrationFit]:
    kf = load_kernel_factors()
    start = replace(old or START, **scalar_fallback(kf), request_overhead_s=0.0, kernels=kf)
    fit = fit_factors(rows, model, catalog, backend=ServingBackend.TRTLLM, start=start,
                      max_evals=args.max_evals, fitted=KERNEL_FITTED)
    groups = leave_one_group_out(fit, model, catalog, fitted=KERNEL_FITTED,
                                 max_evals=args.logo_evals)
    engine_only = replace(fit.factors, closed_loop_burst=1.0, startup_share=0.0)
    bare = CalibrationFit(backend=fit.backend, factors=engine_only, rows=fit.rows,
                          predicted_ms=tuple(predict(r, model, catalog, engine_only, fit.sample)
                                             for r in fit.rows), evaluations=0)
    print("\nleave-one-group-out (refit without the group, predict it):")
    print("| held out | rows | TTFT MAPE | TPOT MAPE | worst ratio |")
    print("|---|---|---|---|---|")
    for g in groups:
        print(f"| {g.by} {g.value} | {g.rows} | {g.ttft_mape:.1%} | {g.tpot_mape:.1%} | "
              f"{g.max_ratio:.2f}x |")
    b = bare.summary()
    print(f"\nwithout the harness terms (burst 1, no start-up share): TTFT MAPE "
          f"{b['ttft_mape']:.1%}, TPOT MAPE {b['tpot_mape']:.1%}, worst {b['max_ratio']:.2f}x")
    entry = {
        "kernels": "builtin",
        "factors": fit.factors.to_dict(),
        "sample": {"kv_cache_fraction": fit.sample.kv_cache_fraction},
        "fit": fit.summary(),
        "fit_without_harness_terms": {k: b[k] for k in ("ttft_mape", "tpot_mape",
                                                        "max_ratio")},
        "validation": {
            "method": "leave-one-group-out: refit the engine terms without the group "
                      f"({args.logo_evals} evaluations from the full fit), predict it",
            "validated_on": {"gpu": "h100-sxm", "weights": "fp8", "model": args.model},
            "groups": [g.to_dict() for g in groups],
        },
    }
    return entry, fit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--model", default="Qwen/Qwen3-32B")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "pdtrt/data/perf_factors.yaml")
    ap.add_argument("--residuals", type=Path, default=ROOT / "docs/calibration-residuals.csv")
    ap.add_argument("--max-evals", type=int, default=120)
    ap.add_argument("--logo-evals", type=int, default=40,
                    help="optimiser evaluations per held-out group (TensorRT-LLM)")
    ap.add_argument("--backend", action="append", choices=[b.value for b in ServingBackend])
    args = ap.parse_args()

    rows = read_rows(args.data)
    model, catalog = load_model_facts(args.model), load_catalog()
    backends = [ServingBackend(b) for b in (args.backend or [b.value for b in ServingBackend])]
    previous = {}
    if args.output.is_file():
        previous = (yaml.safe_load(args.output.read_text(encoding="utf-8")) or {}).get(
            "backends", {})
    old = load_factors_file(args.output) if args.output.is_file() else {}
    command = "python scripts/calibrate.py " + " ".join(sys.argv[1:])
    out: dict[str, object] = {
        "source": {
            "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT)
                        else args.data),
            "data_origin": ORIGIN,
            "model": args.model,
            "command": command.strip(),
            "fitted_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "method": "Nelder-Mead on the mean of TTFT and TPOT absolute percentage errors "
                      "(+ a penalty on predictions more than 3x off)",
        },
        "backends": {k: v for k, v in previous.items()
                     if ServingBackend(k) not in backends},
    }
    residuals = []
    print("| backend | rows | TTFT MAPE | TPOT MAPE | TTFT APE median / p90 | "
          "TPOT APE median / p90 | worst ratio |")
    print("|---|---|---|---|---|---|---|")
    for backend in backends:
        if backend is ServingBackend.TRTLLM:
            entry, fit = _kernel_fit(rows, model, catalog, old.get(backend), args)
        else:
            fit = fit_factors(rows, model, catalog, backend=backend, max_evals=args.max_evals,
                              fitted=SCALAR_FITTED)
            entry = {"factors": fit.factors.to_dict(), "fit": fit.summary()}
        entry["fitted_with"] = command.strip()
        out["backends"][backend.value] = entry
        print(_row_line(str(backend), fit.summary()), flush=True)
        for r, (pt, pp) in zip(fit.rows, fit.predicted_ms, strict=True):
            residuals.append([r.backend.value, r.backend_version, "fp8" if r.fp8 else "bf16",
                              r.isl, r.osl, r.concurrency, r.tp, round(r.ttft_ms, 2),
                              round(pt, 2), round(r.tpot_ms, 3), round(pp, 3)])
    out["backends"] = {b.value: out["backends"][b.value] for b in ServingBackend
                       if b.value in out["backends"]}
    header = ("# Factors of pdtrt's performance model, fitted by scripts/calibrate.py -- do not "
              "edit by hand;\n# re-run the script (see docs/planning.md). trtllm's "
              "efficiencies are the kernel curves in\n# kernel_factors.json "
              "(scripts/derive_kernel_factors.py); its 'factors' are engine terms.\n")
    write_atomic(args.output, header + yaml.safe_dump(out, sort_keys=False))
    if residuals:
        kept = []
        if args.residuals.is_file():
            with args.residuals.open(newline="") as fh:
                kept = [r for r in list(csv.reader(fh))[1:]
                        if ServingBackend(r[0]) not in backends]
        args.residuals.parent.mkdir(parents=True, exist_ok=True)
        with args.residuals.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["backend", "version", "precision", "isl", "osl", "concurrency", "tp",
                        "ttft_ms", "pred_ttft_ms", "tpot_ms", "pred_tpot_ms"])
            w.writerows(sorted(kept + residuals,
                               key=lambda r: [b.value for b in ServingBackend].index(r[0])))
    print(f"wrote {args.output} and {args.residuals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
