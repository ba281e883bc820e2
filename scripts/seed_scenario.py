#!/usr/bin/env python3
"""The seed scenario of benchmarks/seed_scenario.md: Llama-3.1-8B, ISL 3000, OSL 500, all-H100
aggregated vs H100 prefill + L40S decode, simulated at several loads.

    .venv/bin/python scripts/seed_scenario.py [--num-requests 600]

Prints markdown tables: per load the simulated percentiles of each configuration, and per
configuration the highest Poisson rate at which 90 % of simulated requests have TTFT <= 1000 ms
and TPOT <= 30 ms (the spec's SLO, judged by pdtrt.workload.evaluate_slo), with its cost.
Uses the built-in calibrated factors (trtllm).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import WeightQuant  # noqa: E402
from pdtrt.perf.configs import aggregated_baseline, serving_from_deployment  # noqa: E402
from pdtrt.perf.factors import load_factors  # noqa: E402
from pdtrt.sim import SimConfig, SimWorkload, simulate  # noqa: E402
from pdtrt.spec.load import load_deployment  # noqa: E402
from pdtrt.workload import SLO, LengthDist  # noqa: E402

SPEC_SLO = SLO(ttft_ms=1000, itl_ms=30)


def run(serving, rate, n, f):
    w = SimWorkload(rate_per_s=rate, isl=LengthDist.fixed(3000), osl=LengthDist.fixed(500))
    return simulate(SimConfig(serving=serving, factors_prefill=f, factors_decode=f,
                              workload=w, num_requests=n, slo=SPEC_SLO))


def capacity(serving, n, f, hi=64.0):
    lo = 0.0
    for _ in range(9):
        mid = (lo + hi) / 2
        res = run(serving, mid, max(n, int(mid * 90)), f)  # >= 90 s of arrivals
        lo, hi = (mid, hi) if res.slo_met else (lo, mid)
    return lo


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-requests", type=int, default=600)
    args = ap.parse_args()
    f = load_factors()
    dep = load_deployment(ROOT / "docs" / "examples" / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
    dis = serving_from_deployment(dep)
    fp8 = replace(dis, decode=replace(dis.decode, weights=WeightQuant.FP8),
                  prefill=replace(dis.prefill, weights=WeightQuant.FP8))
    configs = {
        "agg 2x H100": aggregated_baseline(dep, instances=2),
        "agg 3x H100": aggregated_baseline(dep, instances=3),
        "disagg 1x H100 + 2x L40S (spec)": dis,
        "disagg, FP8 weights": fp8,
    }
    print(f"factors: {f}")
    print("| load | configuration | $/h | TTFT p50 / p90 / p99 ms | ITL p50 / p90 / p99 ms | "
          "TPOT mean ms | $/M tok |")
    print("|---|---|---|---|---|---|---|")
    for rate in (1.0, 2.0, 4.0, 8.0):
        for name, cfg in configs.items():
            r = run(cfg, rate, args.num_requests, f)
            t, i = r.ttft_ms, r.itl_ms
            usd = "-" if r.usd_per_mtok is None else f"{r.usd_per_mtok:.3f}"
            note = "" if r.num_unfinished == 0 else f" ({r.num_unfinished} unfinished)"
            print(f"| {rate:g} req/s | {name}{note} | {cfg.cost_per_hour_usd():.2f} | "
                  f"{t.p50:.0f} / {t.p90:.0f} / {t.p99:.0f} | "
                  f"{i.p50:.1f} / {i.p90:.1f} / {i.p99:.1f} | "
                  f"{r.tpot_ms.mean:.1f} | {usd} |", flush=True)
    print()
    print("| configuration | $/h | max rate at SLO (req/s) | req/s per $/h |")
    print("|---|---|---|---|")
    for name, cfg in configs.items():
        cap = capacity(cfg, max(200, args.num_requests // 2), f)
        cost = cfg.cost_per_hour_usd()
        print(f"| {name} | {cost:.2f} | {cap:.2f} | {cap / cost:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
