"""The SLO definition: per request (TTFT and TPOT), attainment, goodput, the verdict."""

from __future__ import annotations

import pytest

from pdtrt.enums import Percentile
from pdtrt.errors import WorkloadError
from pdtrt.workload import SLO, RequestOutcome, evaluate_slo
from pdtrt.workload.slo import backlog_growing, measurement_window_s


def out(sent_s=0.0, ttft_s=0.05, tpot_s=0.01, *, done_s=1.0, ok=True):
    return RequestOutcome(sent_s=sent_s, done_s=done_s, ttft_s=ttft_s, tpot_s=tpot_s, ok=ok)


SLO_100_20 = SLO(percentile=Percentile.P50, ttft_ms=100, itl_ms=20)


@pytest.mark.parametrize(("outcome", "meets"), [
    (out(), True),
    (out(ttft_s=0.1), True),  # at the target is within it
    (out(ttft_s=0.3), False),
    (out(tpot_s=0.021), False),
    (out(tpot_s=None), True),  # a one-token answer has no TPOT to miss
    (out(ttft_s=None, tpot_s=None), False),  # no token at all
    (out(ok=False), False),
    (out(done_s=None), False),
], ids=["fast", "at-target", "slow-first-token", "slow-tokens", "one-token", "no-token",
        "error", "unfinished"])
def test_a_request_meets_the_slo_by_its_own_ttft_and_tpot(outcome, meets):
    assert outcome.meets(SLO_100_20) is meets


def test_targets_are_optional():
    assert out(ttft_s=9.0).meets(SLO(itl_ms=20)) and not out(tpot_s=1.0).meets(SLO(itl_ms=20))
    assert out(ttft_s=9.0, tpot_s=9.0).meets(SLO()) and not out(ok=False).meets(SLO())


def test_attainment_counts_failures_and_goodput_uses_the_window():
    outcomes = [out(0.0, done_s=1.0), out(0.5, ttft_s=0.3, done_s=2.0),
                out(1.0, done_s=3.0, ok=False), out(1.5, done_s=None)]
    r = evaluate_slo(outcomes, SLO_100_20)
    assert (r.num_requests, r.num_good) == (4, 1) and r.attainment == 0.25
    assert r.window_s == pytest.approx(3.0)  # first send 0 -> last completion 3
    assert r.goodput_req_per_s == pytest.approx(1 / 3) and not r.meets_slo
    assert measurement_window_s([out(done_s=None)]) == 0.0


@pytest.mark.parametrize(("good", "total", "percentile", "met"), [
    (27, 30, Percentile.P90, True), (26, 30, Percentile.P90, False),
    (99, 100, Percentile.P99, True), (5, 10, Percentile.P50, True), (4, 10, Percentile.P50, False),
], ids=["27-of-30-p90", "26-of-30-p90", "99-of-100-p99", "half-p50", "below-half-p50"])
def test_met_when_attainment_reaches_the_percentile(good, total, percentile, met):
    outcomes = [out(i * 0.1) for i in range(good)] + \
        [out(i * 0.1, ttft_s=0.05, tpot_s=1.0) for i in range(total - good)]
    r = evaluate_slo(outcomes, SLO(percentile=percentile, ttft_ms=100, itl_ms=20))
    assert r.attainment == pytest.approx(good / total) and r.meets_slo is met


def test_a_growing_backlog_never_meets_the_slo():
    # TTFT climbing from 0.1 s to 3 s over the run: every request within a generous target
    growing = [out(i * 0.1, ttft_s=0.1 + 0.1 * i, done_s=i * 0.1 + 5) for i in range(30)]
    r = evaluate_slo(growing, SLO(ttft_ms=60_000, itl_ms=1000))
    assert r.attainment == 1.0 and r.backlog_growing and not r.meets_slo
    steady = [out(i * 0.1, ttft_s=0.1 + 0.001 * (i % 3)) for i in range(30)]
    assert not backlog_growing(steady) and evaluate_slo(steady, SLO(ttft_ms=200)).meets_slo
    assert not backlog_growing(growing[:19])  # too few requests to tell


def test_no_requests_do_not_meet_an_slo():
    r = evaluate_slo([], SLO(ttft_ms=100))
    assert (r.attainment, r.goodput_req_per_s, r.meets_slo) == (0.0, 0.0, False)


def test_slo_checks_its_values():
    assert SLO(percentile=95).percentile is Percentile.P95  # YAML / CLI integers
    assert SLO(ttft_ms=5).to_dict() == {"percentile": 90, "ttft_ms": 5, "itl_ms": None}
    with pytest.raises(WorkloadError, match="percentile 80 is not one of 50, 90, 95, 99"):
        SLO(percentile=80)
    with pytest.raises(WorkloadError, match="itl_ms must be > 0"):
        SLO(itl_ms=0)
