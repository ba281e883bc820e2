"""benchmarks/price_ratio_map.py: its price arithmetic, the owned-fleet ratios, and a smoke run
that writes the map (the numbers are reported in benchmarks/price_ratio_map.md)."""

from __future__ import annotations

import json
import math

import pytest

from pdtrt.enums import ServingMode
from tests.benchmarks.conftest import load_script

prm = load_script("price_ratio_map")
AGG, DIS = ServingMode.AGGREGATED, ServingMode.DISAGGREGATED


def test_ratio_is_linear_in_prices_and_picks_each_mode_s_cheapest():
    shapes = [prm.Shape(mode=AGG, h100=3, l40s=0, label="agg 3x h100"),
              prm.Shape(mode=AGG, h100=0, l40s=8, label="agg 8x l40s"),
              prm.Shape(mode=DIS, h100=1, l40s=4, label="split 1 + 4")]
    # rho 0.2: agg L40S 1.6, split 1.8 -> 1.125; rho 0.5: agg H100 3, split 3 -> 1.0
    assert prm.split_over_aggregated(shapes, 0.2) == (pytest.approx(1.8 / 1.6), "split 1 + 4",
                                                      "agg 8x l40s")
    assert prm.split_over_aggregated(shapes, 0.5)[0] == pytest.approx(1.0)
    ratio, split, agg = prm.split_over_aggregated(shapes[:2], 0.5)
    assert math.isnan(ratio) and split == "-" and agg == "agg 3x h100"


def test_owned_l40s_cost_its_board_power():
    assert prm.owned_rhos((5.0,), power=0.2) == [pytest.approx(0.350 * 0.2 / 5.0)]


def test_smoke_run_writes_the_map_with_the_seed_cell(tmp_path):
    assert prm.main(["--smoke", "--out-dir", str(tmp_path)]) == 0
    assert (tmp_path / "price-ratio-map.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads((tmp_path / "price_ratio_map.json").read_text())
    (cell,) = data["cells"]
    assert (cell["model"], cell["isl"], cell["osl"], cell["itl_ms"]) == (
        "Llama-3.1-8B", 3000, 500, 30)
    assert cell["passing"] > 0 and [p["x"] for p in cell["rented"]] == [0.2, 0.378, 1.0]
    assert all(p["ratio"] is not None and p["ratio"] > 0 for p in cell["rented"])
    assert all(p["split"].startswith("disagg ") for p in cell["rented"] + cell["owned"])
