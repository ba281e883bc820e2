#!/usr/bin/env python3
"""The seed scenario's cost per million tokens against the request rate, and where the split pays.

    .venv/bin/python benchmarks/seed_crossover.py     # 11-20 min; writes the PNG and results below
    .venv/bin/python benchmarks/seed_crossover.py --replot    # redraw the PNG from the JSON

The seed spec (docs/examples/llama3-8b-h100-l40s-trtllm-0.21.yaml: Llama-3.1-8B, BF16 weights,
FP8 KV cache, ISL 3000 / OSL 500, SLO p90 TTFT <= 1000 ms and TPOT <= 30 ms per request) as
three families of deployments, each at every rate of a grid given the fewest instances that meet
the SLO in simulation (Poisson arrivals, pdtrt.workload.evaluate_slo):

- **aggregated H100**: n x H100 TP1, the spec's aggregated baseline instance with
  ``max_num_tokens`` 2048 or 8192 (the chunk budgets ``pdtrt plan`` tries), whichever is cheaper;
- **aggregated L40S**: the same on L40S, TP1 or TP2, whichever is cheapest at that rate;
- **split**: a x H100 TP1 prefill + b x L40S TP1 decode, the spec's two instances, the
  cheapest (a, b).

Cost per million output tokens = the deployment's $/h / (rate x OSL x 3600) x 1e6, catalog
prices (H100 SXM $4.916/h, L40S $1.86/h). The **crossover** is the lowest rate of the grid from
which on the split is the cheapest of the three at every higher rate of the grid; the script
also runs ``pdtrt plan --gpus h100-sxm,l40s`` at a few rates for its verdict. Writes
docs/img/seed-cost-vs-rate.png and benchmarks/results/seed_crossover.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _cheapest import cheapest_pair, fewest  # noqa: E402  (benchmarks/_cheapest.py)

from pdtrt.enums import ServingMode  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.perf.configs import aggregated_baseline, serving_from_deployment  # noqa: E402
from pdtrt.perf.estimate import ServingConfig  # noqa: E402
from pdtrt.perf.factors import EfficiencyFactors, load_factors  # noqa: E402
from pdtrt.perf.step import prefill_time_s  # noqa: E402
from pdtrt.planner.request import PlanRequest  # noqa: E402
from pdtrt.planner.search import plan  # noqa: E402
from pdtrt.sim import SimConfig, SimWorkload, simulate  # noqa: E402
from pdtrt.spec.load import load_deployment  # noqa: E402
from pdtrt.workload import SLO, LengthDist  # noqa: E402

SPEC = ROOT / "docs" / "examples" / "llama3-8b-h100-l40s-trtllm-0.21.yaml"
PNG = ROOT / "docs" / "img" / "seed-cost-vs-rate.png"
RESULTS = ROOT / "benchmarks" / "results"
ISL, OSL = 3000, 500
SEED_SLO = SLO(ttft_ms=1000, itl_ms=30)
RATES = (0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
PLAN_RATES = (2, 8, 24)
FAMILIES = ("aggregated H100", "aggregated L40S", "split H100 -> L40S")
MAX_INSTANCES = 64
AGG_MAX_NUM_TOKENS = (2048, 8192)  # chunked prefill budgets pdtrt plan tries for aggregated


@dataclass(frozen=True, kw_only=True)
class Point:
    family: str
    rate_per_s: float
    config: ServingConfig | None  # None: nothing within MAX_INSTANCES meets the SLO

    @property
    def usd_per_mtok(self) -> float:
        if self.config is None:
            return math.inf
        return self.config.cost_per_hour_usd() / (self.rate_per_s * OSL * 3600) * 1e6


def _meets(config: ServingConfig, rate: float, f: EfficiencyFactors, num_requests: int) -> bool:
    workload = SimWorkload(isl=LengthDist.fixed(ISL), osl=LengthDist.fixed(OSL),
                           rate_per_s=rate)
    n = max(num_requests, int(rate * 60))  # >= 60 s of arrivals
    return simulate(SimConfig(serving=config, factors_prefill=f, factors_decode=f,
                              workload=workload, num_requests=n, slo=SEED_SLO)).slo_met


def _low(config: ServingConfig, rate: float, f: EfficiencyFactors) -> int:
    """Half the instances the prompts' own work needs (a safe start for the search)."""
    return max(1, math.floor(0.5 * rate * prefill_time_s(config.prefill, f, ISL)))


def cheapest_aggregated(base: ServingConfig, rate: float, f: EfficiencyFactors,
                        num_requests: int) -> ServingConfig | None:
    def with_n(n: int) -> ServingConfig:
        return replace(base, prefill_instances=n)

    n = fewest(lambda n: _meets(with_n(n), rate, f, num_requests), _low(base, rate, f),
               MAX_INSTANCES)
    return None if n is None else with_n(n)


def cheapest_split(base: ServingConfig, rate: float, f: EfficiencyFactors,
                   num_requests: int) -> ServingConfig | None:
    def with_ab(a: int, b: int) -> ServingConfig:
        return replace(base, prefill_instances=a, decode_instances=b)

    pair = cheapest_pair(lambda a, b: _meets(with_ab(a, b), rate, f, num_requests),
                         lambda a, b: with_ab(a, b).cost_per_hour_usd(),
                         low=_low(base, rate, f), high=MAX_INSTANCES)
    return None if pair is None else with_ab(*pair)


def families(spec: Path = SPEC) -> dict[str, tuple[ServingConfig, ...]]:
    """The instance shapes of each family (module doc), one instance each."""
    dep = load_deployment(spec)
    agg = aggregated_baseline(dep, instances=1)
    l40s = load_catalog().get("l40s")

    def shapes(gpu, tps):
        return tuple(replace(agg, prefill=replace(agg.prefill, gpu=gpu, tp=tp,
                                                  max_num_tokens=tokens))
                     for tp in tps for tokens in AGG_MAX_NUM_TOKENS)

    split = serving_from_deployment(dep)
    assert split.mode is ServingMode.DISAGGREGATED
    return {FAMILIES[0]: shapes(agg.prefill.gpu, (1,)), FAMILIES[1]: shapes(l40s, (1, 2)),
            FAMILIES[2]: (split,)}


def sweep(rates=RATES, num_requests: int = 600) -> list[Point]:
    f = load_factors()
    shapes = families()
    points = []
    for rate in rates:
        for family, bases in shapes.items():
            find = cheapest_split if family == FAMILIES[2] else cheapest_aggregated
            found = [c for c in (find(b, rate, f, num_requests) for b in bases) if c]
            best = min(found, key=lambda c: c.cost_per_hour_usd(), default=None)
            points.append(Point(family=family, rate_per_s=rate, config=best))
            print(f"{rate:g} req/s  {family}: "
                  f"{best.label() if best else 'none'}", file=sys.stderr, flush=True)
    return points


def crossover(points: list[Point]) -> float | None:
    """The lowest rate from which on the split is the cheapest at every grid rate (None: the
    split is not the cheapest at the highest rate)."""
    rates = sorted({p.rate_per_s for p in points})
    cheapest_is_split = {}
    for r in rates:
        here = {p.family: p.usd_per_mtok for p in points if p.rate_per_s == r}
        others = min(v for k, v in here.items() if k != FAMILIES[2])
        cheapest_is_split[r] = here[FAMILIES[2]] < others
    out = None
    for r in reversed(rates):
        if not cheapest_is_split[r]:
            break
        out = r
    return out


def break_even_l40s_usd(points: list[Point], rate: float) -> float | None:
    """The L40S price per hour at which the split at ``rate`` would cost what the cheaper
    aggregated family does (its H100s kept at their price); None without both."""
    here = {p.family: p.config for p in points if p.rate_per_s == rate}
    split = here.get(FAMILIES[2])
    aggs = [c for f, c in here.items() if f != FAMILIES[2] and c is not None]
    if split is None or not aggs:
        return None
    target = min(c.cost_per_hour_usd() for c in aggs)
    h100_usd = split.prefill.price_per_hour_usd() * split.prefill_instances
    return (target - h100_usd) / (split.decode_instances * split.decode.num_gpus)


def rows(points: list[Point]) -> list[dict[str, object]]:
    """The points as JSON rows (what the results file holds and the plot reads)."""
    return [{"family": p.family, "rate_per_s": p.rate_per_s,
             "config": p.config.label() if p.config else None,
             "cost_per_hour_usd": round(p.config.cost_per_hour_usd(), 3) if p.config else None,
             "usd_per_mtok": round(p.usd_per_mtok, 4) if p.config else None} for p in points]


def plot(table: list[dict[str, object]], cross: float | None, path: Path = PNG) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    for family, marker in zip(FAMILIES, ("o", "s", "^"), strict=True):
        mine = [r for r in table if r["family"] == family and r["usd_per_mtok"] is not None]
        ax.plot([r["rate_per_s"] for r in mine], [r["usd_per_mtok"] for r in mine],
                marker=marker, label=family)
    if cross is not None:
        ax.axvline(cross, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"split cheapest from {cross:g} req/s", (cross, ax.get_ylim()[1]),
                    textcoords="offset points", xytext=(4, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"${v:g}"))
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("request rate (req/s, Poisson; ISL 3000, OSL 500)")
    ax.set_ylabel("$ per million output tokens")
    ax.set_title("Llama-3.1-8B seed scenario: cheapest deployment meeting "
                 "p90 TTFT <= 1 s, TPOT <= 30 ms", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plan_verdicts(rates=PLAN_RATES) -> dict[float, str]:
    dep = load_deployment(SPEC)
    catalog = load_catalog()
    out = {}
    for rate in rates:
        req = PlanRequest(model=dep.model, gpus=(catalog.get("h100-sxm"), catalog.get("l40s")),
                          isl=ISL, osl=OSL, rate_per_s=rate, slo=SEED_SLO,
                          factors=load_factors(), catalog=catalog)
        out[rate] = plan(req).verdict
    return out


def markdown(points: list[Point], cross: float | None, verdicts: dict[float, str]) -> str:
    lines = ["# Seed scenario: cost per million output tokens vs request rate", "",
             "Written by `benchmarks/seed_crossover.py` (module doc for the method).", "",
             "| req/s | " + " | ".join(FAMILIES) + " | L40S $/h at which the split would "
             "match |", "|---|---|---|---|---|"]
    for r in sorted({p.rate_per_s for p in points}):
        cells = []
        for fam in FAMILIES:
            p = next(p for p in points if p.rate_per_s == r and p.family == fam)
            cells.append("none within 64 instances" if p.config is None else
                         f"${p.usd_per_mtok:.3f} ({p.config.label()}, "
                         f"${p.config.cost_per_hour_usd():.2f}/h)")
        even = break_even_l40s_usd(points, r)
        cells.append("-" if even is None else f"${even:.2f}" if even > 0 else
                     "never (its H100s alone cost as much)")
        lines.append(f"| {r:g} | " + " | ".join(cells) + " |")
    lines += ["", "Crossover: " + (f"the split is the cheapest from {cross:g} req/s on"
                                   if cross is not None else
                                   "none -- the split is not the cheapest at the highest rate"),
              ""]
    lines += [f"- `pdtrt plan` at {r:g} req/s: {v}" for r, v in verdicts.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-requests", type=int, default=600)
    ap.add_argument("--rates", type=lambda s: tuple(float(x) for x in s.split(",")),
                    default=RATES, help="comma-separated grid, req/s")
    ap.add_argument("--plan-rates", type=lambda s: tuple(float(x) for x in s.split(",")),
                    default=PLAN_RATES, help="rates of the pdtrt plan verdicts, req/s")
    ap.add_argument("--png", type=Path, default=PNG)
    ap.add_argument("--out", type=Path, default=RESULTS / "seed_crossover.md")
    ap.add_argument("--replot", action="store_true",
                    help="only redraw the PNG from the results JSON (no simulation)")
    args = ap.parse_args(argv)
    if args.replot:
        saved = json.loads(args.out.with_suffix(".json").read_text(encoding="utf-8"))
        plot(saved["points"], saved["crossover_req_per_s"], args.png)
        return 0
    points = sweep(args.rates, args.num_requests)
    cross = crossover(points)
    plot(rows(points), cross, args.png)
    text = markdown(points, cross, plan_verdicts(args.plan_rates))
    args.out.write_text(text, encoding="utf-8")
    args.out.with_suffix(".json").write_text(
        json.dumps({"crossover_req_per_s": cross, "points": rows(points)}, indent=1) + "\n",
        encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
