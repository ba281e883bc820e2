#!/usr/bin/env python3
"""Fit pdtrt's efficiency factors on measured serving runs and write them with provenance.

    .venv/bin/python scripts/calibrate.py                      # built-in data -> built-in file
    .venv/bin/python scripts/calibrate.py --data my_runs.csv -o my_factors.yaml

Writes the factors file (``pdtrt/data/perf_factors.yaml`` by default) and the per-row
residuals (``docs/calibration-residuals.csv``), and prints the MAPE table of docs/planning.md.
The model of the calibration data is Qwen3-32B; the GPU is taken from each row's ``system``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import ServingBackend  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import load_model_facts  # noqa: E402
from pdtrt.perf.calibrate import fit_factors, read_rows  # noqa: E402
from pdtrt.yamlio import write_atomic  # noqa: E402

DATA = ROOT / "pdtrt" / "data" / "calibration" / "measured_calibration.csv"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--model", default="Qwen/Qwen3-32B")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "pdtrt/data/perf_factors.yaml")
    ap.add_argument("--residuals", type=Path, default=ROOT / "docs/calibration-residuals.csv")
    ap.add_argument("--max-evals", type=int, default=300)
    ap.add_argument("--backend", action="append", choices=[b.value for b in ServingBackend])
    args = ap.parse_args()

    rows = read_rows(args.data)
    model, catalog = load_model_facts(args.model), load_catalog()
    backends = [ServingBackend(b) for b in (args.backend or [b.value for b in ServingBackend])]
    out: dict[str, object] = {
        "source": {
            "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT)
                        else args.data),
            "data_origin": "measured sample shipped in NVIDIA aiconfigurator-core 0.12.0 "
                           "(Qwen3-32B on H100 SXM, aggregated, closed loop)",
            "model": args.model,
            "command": "python scripts/calibrate.py " + " ".join(sys.argv[1:]),
            "fitted_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "method": "Nelder-Mead on the mean of TTFT and TPOT absolute percentage errors",
        },
        "backends": {},
    }
    residuals = []
    print("| backend | rows | TTFT MAPE | TPOT MAPE | TTFT APE median / p90 | "
          "TPOT APE median / p90 |")
    print("|---|---|---|---|---|---|")
    for backend in backends:
        fit = fit_factors(rows, model, catalog, backend=backend, max_evals=args.max_evals)
        s = fit.summary()
        out["backends"][backend.value] = {"factors": fit.factors.to_dict(), "fit": s}
        print(f"| {backend} | {s['rows']} | {s['ttft_mape']:.1%} | {s['tpot_mape']:.1%} | "
              f"{s['ttft_ape_median']:.1%} / {s['ttft_ape_p90']:.1%} | "
              f"{s['tpot_ape_median']:.1%} / {s['tpot_ape_p90']:.1%} |", flush=True)
        for r, (pt, pp) in zip(fit.rows, fit.predicted_ms, strict=True):
            residuals.append([r.backend.value, r.backend_version, "fp8" if r.fp8 else "bf16",
                              r.isl, r.osl, r.concurrency, r.tp, round(r.ttft_ms, 2),
                              round(pt, 2), round(r.tpot_ms, 3), round(pp, 3)])
    header = ("# Efficiency factors of pdtrt's performance model, fitted by scripts/calibrate.py"
              " -- do not edit by hand;\n# re-run the script (see docs/planning.md).\n")
    write_atomic(args.output, header + yaml.safe_dump(out, sort_keys=False))
    args.residuals.parent.mkdir(parents=True, exist_ok=True)
    with args.residuals.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["backend", "version", "precision", "isl", "osl", "concurrency", "tp",
                    "ttft_ms", "pred_ttft_ms", "tpot_ms", "pred_tpot_ms"])
        w.writerows(residuals)
    print(f"wrote {args.output} and {args.residuals}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
