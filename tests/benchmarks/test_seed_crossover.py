"""benchmarks/seed_crossover.py: its families are the seed spec's shapes and its crossover means
what benchmarks/seed_crossover.md says (the numbers it produces are reported there, not asserted
here)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.benchmarks.conftest import load_script

seed_crossover = load_script("seed_crossover")


def test_seed_families_are_the_spec_shapes():
    fams = seed_crossover.families()
    assert {c.prefill.gpu.key for c in fams["aggregated H100"]} == {"h100-sxm"}
    assert {(c.prefill.gpu.key, c.prefill.tp) for c in fams["aggregated L40S"]} == {
        ("l40s", 1), ("l40s", 2)}
    (split,) = fams["split H100 -> L40S"]
    assert (split.prefill.gpu.key, split.decode.gpu.key) == ("h100-sxm", "l40s")


def test_crossover_is_where_the_split_stays_cheapest():
    Point = seed_crossover.Point

    class Priced:  # a config stand-in with a given $/h
        def __init__(self, usd_per_hour):
            self.usd = usd_per_hour

        def cost_per_hour_usd(self):
            return self.usd

    def pts(table):
        return [Point(family=fam, rate_per_s=r, config=Priced(c))
                for r, costs in table.items()
                for fam, c in zip(seed_crossover.FAMILIES, costs, strict=True)]

    # $/h of (agg H100, agg L40S, split) per rate; the split is cheapest from 4 on, and at 1
    table = {1: (5, 6, 4), 2: (5, 4, 6), 4: (10, 12, 9), 8: (20, 24, 17)}
    assert seed_crossover.crossover(pts(table)) == 4
    table[8] = (20, 16, 17)
    assert seed_crossover.crossover(pts(table)) is None


def test_break_even_price_makes_the_split_cost_what_aggregated_does():
    fams = seed_crossover.families()
    agg = fams["aggregated H100"][0]
    split = fams["split H100 -> L40S"][0]  # 1 H100 prefill + 2 L40S decode
    Point = seed_crossover.Point
    points = [Point(family=seed_crossover.FAMILIES[0], rate_per_s=4,
                    config=replace(agg, prefill_instances=3)),
              Point(family=seed_crossover.FAMILIES[1], rate_per_s=4, config=None),
              Point(family=seed_crossover.FAMILIES[2], rate_per_s=4, config=split)]
    even = seed_crossover.break_even_l40s_usd(points, 4)
    h100 = split.prefill.price_per_hour_usd()
    assert h100 + 2 * even == pytest.approx(3 * agg.prefill.price_per_hour_usd())
