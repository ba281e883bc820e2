"""Resolving a benchmark from what was asked, the spec and the defaults (pdtrt.bench.options)."""

from __future__ import annotations

import pytest

from pdtrt.bench.options import BenchOptions, parse_rates, resolve_config
from pdtrt.enums import Percentile
from pdtrt.errors import BenchError
from pdtrt.spec.load import load_deployment
from pdtrt.workload import ArrivalProcess, LoopKind
from tests.conftest import EXAMPLES

ENSEMBLE = ("ensemble",)


def test_defaults_without_a_spec():
    c = resolve_config(BenchOptions(models=ENSEMBLE))
    assert (c.loop, c.concurrency, c.num_requests) == (LoopKind.CLOSED, 1, 50)
    assert (str(c.workload.isl), str(c.workload.osl)) == ("128", "32")
    assert (c.slo.percentile, c.slo.ttft_ms, c.slo.itl_ms) == (Percentile.P90, None, None)
    assert c.cost_per_hour_usd is None


def test_the_spec_fills_every_gap_and_flags_win():
    dep = load_deployment(EXAMPLES / "reference-cpu.yaml")
    spec = dep.spec
    c = resolve_config(BenchOptions(models=ENSEMBLE), dep)
    assert c.concurrency == spec.workload.concurrency and c.loop is LoopKind.CLOSED
    assert (str(c.workload.isl), str(c.workload.osl)) == (str(spec.workload.isl),
                                                          str(spec.workload.osl))
    assert (c.slo.ttft_ms, c.slo.itl_ms) == (spec.slo.ttft_ms, spec.slo.itl_ms)
    assert c.cost_per_hour_usd == dep.cost_per_hour_usd()
    mine = resolve_config(BenchOptions(models=ENSEMBLE, rates_per_s=(3.0,), isl="uniform:5:9",
                                       slo_ttft_ms=999, slo_percentile=Percentile.P99,
                                       arrival=ArrivalProcess.CONSTANT, duration_s=2.0), dep)
    assert (mine.loop, mine.rates_per_s, mine.process) == (LoopKind.OPEN, (3.0,),
                                                           ArrivalProcess.CONSTANT)
    assert str(mine.workload.isl) == "uniform:5:9" and mine.num_requests is None
    assert (mine.slo.ttft_ms, mine.slo.itl_ms, mine.slo.percentile) == (
        999, spec.slo.itl_ms, Percentile.P99)


@pytest.mark.parametrize(("options", "message"), [
    (BenchOptions(models=ENSEMBLE, rates_per_s=(1.0,), concurrency=2), "not both"),
    (BenchOptions(models=ENSEMBLE, isl="uniform:9:3"), "--isl: "),
    (BenchOptions(models=ENSEMBLE, osl="gamma:1"), "--osl: "),
], ids=["rate-and-concurrency", "bad-isl", "bad-osl"])
def test_conflicts_and_bad_lengths_name_the_flag(options, message):
    with pytest.raises(BenchError, match=message):
        resolve_config(options)


def test_rates():
    assert parse_rates("4, 1,2") == (1.0, 2.0, 4.0)
    for bad in ("a,b", "", "1,-2", "0"):
        with pytest.raises(BenchError, match="--rates"):
            parse_rates(bad)
