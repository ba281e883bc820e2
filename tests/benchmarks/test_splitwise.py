"""benchmarks/splitwise.py: its core runs and means what the docs say (the numbers it produces
are reported in benchmarks/splitwise.md, not asserted here)."""

from __future__ import annotations

import math

import pytest

from pdtrt.enums import ServingMode
from pdtrt.facts.catalog import load_catalog
from pdtrt.perf.estimate import Load, estimate
from pdtrt.perf.factors import load_factors
from tests.benchmarks.conftest import load_script

splitwise = load_script("splitwise")



@pytest.fixture(scope="module")
def setup():
    catalog = load_catalog().with_prices(splitwise.PRICES)
    f = load_factors()
    isl, osl = splitwise.TRACES["conversation"]
    return splitwise.Setup(isl=isl, osl=osl, slo=splitwise.splitwise_slo(isl, osl, f, catalog),
                           factors=f, catalog=catalog, num_requests=50)


def test_the_slo_is_splitwise_slowdown_over_an_a100_alone(setup):
    alone = estimate(setup.config("Baseline-A100", 1),
                     Load(isl=setup.isl, osl=setup.osl, rate_per_s=1e-3), setup.factors)
    assert setup.slo.ttft_ms == pytest.approx(3 * alone.ttft_s * 1e3)
    assert setup.slo.itl_ms == pytest.approx(1.5 * alone.point.tpot_s * 1e3)


def test_the_designs_put_the_phases_where_splitwise_does(setup):
    ha = setup.config("Splitwise-HA", 2, 3)
    assert ha.mode is ServingMode.DISAGGREGATED
    assert (ha.prefill.gpu.key, ha.decode.gpu.key) == ("h100-sxm", "a100-sxm")
    assert ha.prefill.tp == ha.decode.tp == 8
    # Splitwise's cost units: a DGX-H100 hour 4.76, a DGX-A100 hour 2.21
    assert ha.cost_per_hour_usd() == pytest.approx(2 * 4.76 + 3 * 2.21)
    assert setup.config("Baseline-H100", 3).mode is ServingMode.AGGREGATED


def test_a_cluster_runs_at_the_published_rate(setup):
    c = splitwise._cluster(setup, "Splitwise-HA", 6, 8)
    assert c.result.num_measured > 0 and math.isfinite(float(c.result.ttft_ms.p90))
