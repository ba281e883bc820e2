#!/usr/bin/env python3
"""Speed of pdtrt's planning stack: estimate calls, simulator events/s, plan search time.

    .venv/bin/python benchmarks/plan_sim_speed.py [--repeat 3] [--json out.json]
    .venv/bin/python benchmarks/plan_sim_speed.py --smoke   # seconds: a check that it runs

Prints a markdown table (recorded in benchmarks/planning.md). Wall-clock time of the
library calls only (no CLI start-up, no plotting); the best of --repeat runs is reported,
since other processes on a shared machine only ever make a run slower. The step-time cache
(:func:`pdtrt.perf.step.step_time` is memoised) is cleared before every run, so each run
pays for its own step times.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import load_model_facts  # noqa: E402
from pdtrt.perf.configs import aggregated_baseline, serving_from_deployment  # noqa: E402
from pdtrt.perf.estimate import Load, estimate  # noqa: E402
from pdtrt.perf.factors import load_factors  # noqa: E402
from pdtrt.perf.step import step_time  # noqa: E402
from pdtrt.planner.search import PlanRequest, plan  # noqa: E402
from pdtrt.planner.space import SearchBounds  # noqa: E402
from pdtrt.sim import SimConfig, SimWorkload, simulate  # noqa: E402
from pdtrt.spec.load import load_deployment  # noqa: E402
from pdtrt.workload import SLO, LengthDist  # noqa: E402

SEED_SPEC = ROOT / "docs" / "examples" / "llama3-8b-h100-l40s-trtllm-0.21.yaml"


def best_of(repeat: int, fn):
    best, out = float("inf"), None
    for _ in range(repeat):
        step_time.cache_clear()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="one run of the smallest of each (20 calls, 100 requests, one plan)")
    args = ap.parse_args()
    if args.smoke:
        args.repeat = 1
    n, num_requests = (20, 100) if args.smoke else (200, 1000)
    plans = ((2.0, 8),) if args.smoke else ((2.0, 8), (4.0, 16), (8.0, 32))
    f = load_factors()
    dep = load_deployment(SEED_SPEC)
    rows = []

    dis = serving_from_deployment(dep)
    t, _ = best_of(args.repeat, lambda: [estimate(dis, Load(isl=3000, osl=500, rate_per_s=r), f)
                                         for r in (0.5, 1, 2, 4) for _ in range(n // 4)])
    rows.append(("estimate, open loop (disagg seed spec)", f"{n / t:,.0f} calls/s", t / n))
    t, _ = best_of(args.repeat, lambda: [estimate(dis, Load(isl=3000, osl=500, concurrency=c), f)
                                         for c in (8, 32, 64, 128) for _ in range(5)])
    rows.append(("estimate, closed loop (bisection)", f"{20 / t:,.0f} calls/s", t / 20))

    for label, serving in (("aggregated 3x H100", aggregated_baseline(dep)),
                           ("disaggregated 1x H100 + 2x L40S", dis)):
        for rate in (2.0, 8.0):
            cfg = SimConfig(serving=serving, factors_prefill=f, factors_decode=f,
                            workload=SimWorkload(rate_per_s=rate, isl=LengthDist.fixed(3000),
                                                 osl=LengthDist.fixed(500)),
                            num_requests=num_requests, slo=SLO(ttft_ms=1000, itl_ms=30))
            t, res = best_of(args.repeat, lambda cfg=cfg: simulate(cfg))
            rows.append((f"simulate {label}, {num_requests} req at {rate:g} req/s",
                         f"{res.num_events / t:,.0f} events/s, {num_requests / t:,.0f} req/s",
                         t))

    model, cat = load_model_facts("meta-llama/Meta-Llama-3.1-8B"), load_catalog()
    for rate, max_gpus in plans:
        req = PlanRequest(model=model, gpus=(cat.get("h100-sxm"), cat.get("l40s")), isl=3000,
                          osl=500, rate_per_s=rate, slo=SLO(ttft_ms=1000, itl_ms=30),
                          factors=f, bounds=SearchBounds(max_gpus=max_gpus))
        t, p = best_of(args.repeat, lambda req=req: plan(req))
        rows.append((f"plan seed scenario, {rate:g} req/s, <= {max_gpus} GPUs",
                     f"{len(p.candidates)} configs, {len(p.simulated)} simulated", t))

    print(f"machine: {platform.platform()}, Python {platform.python_version()}, "
          f"{platform.processor() or platform.machine()}")
    print(f"| benchmark | throughput | wall time (best of {args.repeat}) |")
    print("|---|---|---|")
    for name, what, secs in rows:
        print(f"| {name} | {what} | {secs * 1e3:,.1f} ms |" if secs < 1 else
              f"| {name} | {what} | {secs:,.2f} s |")
    if args.json:
        args.json.write_text(json.dumps([{"benchmark": a, "result": b, "wall_s": c}
                                         for a, b, c in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
