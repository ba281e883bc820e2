#!/usr/bin/env python3
"""Where H100 + L40S pays: cost per token of the best split / the best aggregated deployment,
over the L40S/H100 price ratio x ISL x OSL x ITL target, for Llama-3.1-8B and 70B.

    .venv/bin/python benchmarks/price_ratio_map.py            # full grid; writes the PNG + JSON
    .venv/bin/python benchmarks/price_ratio_map.py --smoke --out-dir /tmp/x   # seconds
    .venv/bin/python benchmarks/price_ratio_map.py --replot   # redraw the PNG from the JSON

For each workload cell (model, ISL, OSL, ITL target; TTFT target ``TTFT_MS``; Poisson arrivals
at ``RATE`` req/s) the planner's search space over {H100 SXM, L40S}
(:func:`pdtrt.planner.space.candidate_configs`, every TP, instance count and engine limit) is
screened with the analytical model: stable, analytical p90 TTFT and TPOT within the targets
(strictly: the planner's own screen allows 15 % slack before it simulates). Prices enter
only at the end, and linearly: a configuration that passes costs ``n_h100 * P_h100 + n_l40s *
P_l40s`` per hour, so one screen per cell serves every price ratio rho = P_l40s / P_h100,
and the map's value is

    min over passing split configurations of (n_h100 + rho n_l40s)
    / min over passing aggregated configurations of (n_h100 + rho n_l40s)

(< 1: disaggregating pays; "split" is any prefill/decode pair, mixed or not; a dot on the
map marks cells whose best split mixes H100 and L40S, and the JSON names each winner). No
simulation: this is the analytical model, which ``pdtrt plan`` then verifies by simulation;
the map shows where to look, not a plan (benchmarks/price_ratio_map.md checks its seed point
by simulation).

The owned-fleet variant prices L40S cards at their board power (350 W) at ``POWER_USD_PER_KWH``
and rents H100s: rho = 0.35 kW x $/kWh / P_h100 over a range of H100 rents. The seed scenario
(Llama-3.1-8B BF16, ISL 3000, OSL 500, ITL 30 ms, catalog prices) is marked on the map.
Writes docs/img/price-ratio-map.png and benchmarks/results/price_ratio_map.json; the write-up
is benchmarks/price_ratio_map.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import KVDType, ServingMode, WeightQuant  # noqa: E402
from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.facts.model import ModelFacts, load_model_facts  # noqa: E402
from pdtrt.perf.estimate import ServingConfig, operating_point  # noqa: E402
from pdtrt.perf.factors import EfficiencyFactors, load_factors  # noqa: E402
from pdtrt.perf.point import OperatingPoint  # noqa: E402
from pdtrt.planner.space import SearchBounds, candidate_configs  # noqa: E402
from pdtrt.workload import SLO  # noqa: E402

MODELS = {"Llama-3.1-8B": ("meta-llama/Meta-Llama-3.1-8B", WeightQuant.NONE),
          "Llama-3.1-70B": ("meta-llama/Meta-Llama-3.1-70B", WeightQuant.FP8)}
ISLS, OSLS, ITLS_MS = (1000, 3000, 8000), (200, 500, 2000), (15, 30, 60)
RHOS = (0.1, 0.15, 0.2, 0.25, 0.3, 0.378, 0.45, 0.55, 0.7, 0.85, 1.0)
H100_RENTS = (1.9, 2.5, 3.5, 4.916, 7.0, 10.0)  # owned-fleet variant's x axis, USD/h
POWER_USD_PER_KWH = 0.15
TTFT_MS, RATE = 1000.0, 16.0
SEED = {"model": "Llama-3.1-8B", "isl": 3000, "osl": 500, "itl_ms": 30}
PNG = ROOT / "docs" / "img" / "price-ratio-map.png"
RESULTS = ROOT / "benchmarks" / "results"
GPUS = ("h100-sxm", "l40s")


@dataclass(frozen=True, kw_only=True)
class Shape:
    """A passing configuration, reduced to what its price needs."""

    mode: ServingMode
    h100: int
    l40s: int
    label: str

    def cost(self, rho: float) -> float:
        """Per hour, in H100-hours (P_h100 = 1, P_l40s = rho)."""
        return self.h100 + rho * self.l40s


def _cards(config: ServingConfig) -> dict[str, int]:
    out = dict.fromkeys(GPUS, 0)
    out[config.prefill.gpu.key] += config.prefill.num_gpus * config.prefill_instances
    if config.mode is ServingMode.DISAGGREGATED and config.decode is not None:
        out[config.decode.gpu.key] += config.decode.num_gpus * config.decode_instances
    return out


def meets(p: OperatingPoint, slo: SLO) -> bool:
    """Stable, and the analytical p90 TTFT and TPOT within the targets (no slack)."""
    return (p.stable and p.ttft_p90_s * 1e3 <= (slo.ttft_ms or math.inf)
            and p.tpot_p90_s * 1e3 <= (slo.itl_ms or math.inf))


def passing_shapes(model: ModelFacts, weights: WeightQuant, f: EfficiencyFactors, *, isl: int,
                   osl: int, itl_ms: float, ttft_ms: float = TTFT_MS,
                   rate: float = RATE) -> list[Shape]:
    """Every configuration of the planner's space on H100 + L40S that :func:`meets` the SLO."""
    catalog = load_catalog()
    slo = SLO(ttft_ms=ttft_ms, itl_ms=itl_ms)
    out = []
    for config in candidate_configs(model, [catalog.get(g) for g in GPUS], f, isl=isl, osl=osl,
                                    rate_per_s=rate, weights=weights, kv_dtype=KVDType.FP8,
                                    bounds=SearchBounds(), itl_target_s=itl_ms / 1e3):
        p = operating_point(config, f, f, isl=isl, osl=osl, rate_per_s=rate)
        if meets(p, slo):
            cards = _cards(config)
            out.append(Shape(mode=config.mode, h100=cards["h100-sxm"], l40s=cards["l40s"],
                             label=config.label()))
    return out


def split_over_aggregated(shapes: list[Shape], rho: float) -> tuple[float, str, str]:
    """(best split cost / best aggregated cost, the two winners' labels); nan when either
    mode has no passing configuration."""
    def best(mode: ServingMode) -> Shape | None:
        return min((s for s in shapes if s.mode is mode), key=lambda s: (s.cost(rho), s.label),
                   default=None)

    split, agg = best(ServingMode.DISAGGREGATED), best(ServingMode.AGGREGATED)
    if split is None or agg is None:
        return math.nan, split.label if split else "-", agg.label if agg else "-"
    return split.cost(rho) / agg.cost(rho), split.label, agg.label


def owned_rhos(h100_rents=H100_RENTS, power=POWER_USD_PER_KWH) -> list[float]:
    """L40S at board power (catalog tdp_w) against each H100 rent, as price ratios."""
    kw = (load_catalog().get("l40s").tdp_w or 0) / 1e3
    return [kw * power / rent for rent in h100_rents]


def sweep(models=MODELS, isls=ISLS, osls=OSLS, itls=ITLS_MS, rhos=RHOS,
          h100_rents=H100_RENTS) -> list[dict]:
    f = load_factors()
    cells = []
    for name, (ref, weights) in models.items():
        model = load_model_facts(ref)
        for isl in isls:
            for osl in osls:
                for itl in itls:
                    shapes = passing_shapes(model, weights, f, isl=isl, osl=osl, itl_ms=itl)
                    rented = [split_over_aggregated(shapes, r) for r in rhos]
                    owned = [split_over_aggregated(shapes, r) for r in owned_rhos(h100_rents)]
                    cells.append({"model": name, "isl": isl, "osl": osl, "itl_ms": itl,
                                  "passing": len(shapes),
                                  "rented": [_point(r, v) for r, v in zip(rhos, rented,
                                                                          strict=True)],
                                  "owned": [_point(r, v) for r, v in zip(h100_rents, owned,
                                                                         strict=True)]})
                    print(f"{name} {isl}/{osl} ITL {itl}: {len(shapes)} pass", file=sys.stderr,
                          flush=True)
    return cells


def _point(x: float, value: tuple[float, str, str]) -> dict[str, object]:
    ratio, split, agg = value
    return {"x": x, "ratio": None if math.isnan(ratio) else round(ratio, 4), "split": split,
            "aggregated": agg}


def plot(cells: list[dict], path: Path, rhos=RHOS, h100_rents=H100_RENTS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    models = list(dict.fromkeys(c["model"] for c in cells))
    fig, axes = plt.subplots(2, len(models), figsize=(7 * len(models), 11), squeeze=False)
    norm = LogNorm(vmin=0.25, vmax=4.0)
    cmap = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="0.6")
    seed_rho = (load_catalog().get("l40s").price_per_hour_usd
                / load_catalog().get("h100-sxm").price_per_hour_usd)
    image = None
    for col, name in enumerate(models):
        mine = [c for c in cells if c["model"] == name]
        rows = [f"{c['isl']}/{c['osl']} ITL {c['itl_ms']}" for c in mine]
        for row, (key, xs, xlabel) in enumerate((
                ("rented", rhos, "L40S / H100 price ratio (both rented)"),
                ("owned", h100_rents, f"H100 rent, USD/h (owned L40S at 350 W x "
                                      f"${POWER_USD_PER_KWH}/kWh)"))):
            ax = axes[row][col]
            grid = np.array([[np.nan if p["ratio"] is None else p["ratio"] for p in c[key]]
                             for c in mine])
            image = ax.imshow(grid, aspect="auto", cmap=cmap, norm=norm,
                              interpolation="nearest")
            ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs], fontsize=7)
            ax.set_yticks(range(len(rows)), rows, fontsize=6)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_title(f"{name}: best split / best aggregated ({key})", fontsize=9)
            for i, c in enumerate(mine):  # a dot: the best split mixes H100 and L40S
                for j, p in enumerate(c[key]):
                    if p["ratio"] is not None and all(g in p["split"] for g in GPUS):
                        ax.plot(j, i, ".", color="black", markersize=3)
            for i, c in enumerate(mine):
                if (name, c["isl"], c["osl"], c["itl_ms"]) != (
                        SEED["model"], SEED["isl"], SEED["osl"], SEED["itl_ms"]):
                    continue
                if key == "rented":
                    j = min(range(len(xs)), key=lambda j: abs(xs[j] - seed_rho))
                else:
                    j = min(range(len(xs)), key=lambda j: abs(xs[j] - 4.916))
                ax.scatter([j], [i], marker="*", s=180, c="blue", edgecolors="white",
                           label="seed scenario")
                ax.legend(loc="upper right", fontsize=7)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.6,
                           label="cost per token, best split / best aggregated (< 1: split pays)")
        ticks = [0.25, 0.5, 1.0, 2.0, 4.0]
        bar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    fig.suptitle(f"Where H100 + L40S pays (analytical model; TTFT p90 {TTFT_MS:g} ms, "
                 f"{RATE:g} req/s; dot: the best split mixes H100 and L40S; grey: a mode has "
                 "no passing configuration)", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true",
                    help="one cell per model, three ratios (seconds): for the tests")
    ap.add_argument("--out-dir", type=Path, help="write the PNG and JSON here instead")
    ap.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON")
    args = ap.parse_args(argv)
    if args.replot:
        data = json.loads((RESULTS / "price_ratio_map.json").read_text(encoding="utf-8"))
        cells = data["cells"]
        plot(cells, PNG, rhos=[p["x"] for p in cells[0]["rented"]],
             h100_rents=[p["x"] for p in cells[0]["owned"]])
        print(f"wrote {PNG}")
        return 0
    if args.smoke:
        kw = dict(models={"Llama-3.1-8B": MODELS["Llama-3.1-8B"]}, isls=(3000,), osls=(500,),
                  itls=(30,), rhos=(0.2, 0.378, 1.0), h100_rents=(2.5, 4.916))
    else:
        kw = {}
    cells = sweep(**kw)
    png = (args.out_dir / PNG.name) if args.out_dir else PNG
    out_json = (args.out_dir if args.out_dir else RESULTS) / "price_ratio_map.json"
    plot(cells, png, **{k: v for k, v in kw.items() if k in ("rhos", "h100_rents")})
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps({"ttft_ms": TTFT_MS, "rate_per_s": RATE,
                                    "power_usd_per_kwh": POWER_USD_PER_KWH, "seed": SEED,
                                    "cells": cells}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {png} and {out_json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
