"""Acceptance: bench's summary and the simulator's metrics judge the same per-request records
the same way -- one attainment, one goodput, one verdict -- because both call
:func:`pdtrt.workload.slo.evaluate_slo`."""

from __future__ import annotations

import numpy as np
import pytest

import pdtrt.bench.stats
import pdtrt.sim.metrics
import pdtrt.workload.slo
from pdtrt.bench.records import RequestRecord
from pdtrt.bench.stats import summarize
from pdtrt.enums import Percentile, ServingMode
from pdtrt.sim.entities import Request
from pdtrt.sim.metrics import SimResult, outcome
from pdtrt.workload import SLO

# (send s, TTFT s, TPOT s, output tokens): fast ones, slow first tokens, slow streams, and
# one-token answers; 24 requests so the backlog check is live
ROWS = ([(0.25 * i, 0.08, 0.012, 40) for i in range(16)]
        + [(4.0 + 0.25 * i, 0.40, 0.012, 40) for i in range(3)]
        + [(4.75 + 0.25 * i, 0.08, 0.030, 40) for i in range(3)]
        + [(5.5, 0.05, 0.0, 1), (5.75, 0.30, 0.0, 1)])


def _token_times(sent_s, ttft_s, tpot_s, n):
    first = sent_s + ttft_s
    return tuple(first + k * tpot_s for k in range(n))


def bench_records():
    out = []
    for i, (sent, ttft, tpot, n) in enumerate(ROWS):
        times = _token_times(sent, ttft, tpot, n)
        out.append(RequestRecord(index=i, model="m", request_id=str(i), warmup=False,
                                 scheduled_s=sent, send_s=sent, token_times_s=times,
                                 end_s=times[-1], input_tokens=100, max_tokens=n))
    return out


def sim_result(slo):
    reqs = []
    for i, (sent, ttft, tpot, n) in enumerate(ROWS):
        times = _token_times(sent, ttft, tpot, n)
        reqs.append(Request(id=i, arrival_s=sent, isl=100, osl=n, prefilled=100, generated=n,
                            first_token_s=times[0], last_token_s=times[-1], done_s=times[-1]))
    return SimResult(label="x", mode=ServingMode.DISAGGREGATED, seed=0, num_requests=len(reqs),
                     num_unfinished=0, outcomes=tuple(outcome(r) for r in reqs),
                     itl_s=np.array([]), itl_time_s=np.array([]),
                     output_tokens=sum(r.osl for r in reqs), utilisation={}, num_gpus=1,
                     cost_per_hour_usd=1.0, slo=slo, num_events=0)


@pytest.mark.parametrize(("slo", "met"), [
    (SLO(percentile=Percentile.P50, ttft_ms=200, itl_ms=20), True),
    (SLO(percentile=Percentile.P90, ttft_ms=200, itl_ms=20), False),  # 17 of 24 = 71 %
    (SLO(percentile=Percentile.P90, ttft_ms=500, itl_ms=50), True),
    (SLO(percentile=Percentile.P99, ttft_ms=200), False),
], ids=["p50-met", "p90-missed", "p90-loose-met", "p99-ttft-only"])
def test_bench_summary_and_sim_metrics_agree(slo, met):
    summary = summarize(bench_records(), slo=slo)
    sim = sim_result(slo)
    assert summary.slo_attainment == sim.attainment
    assert summary.goodput_req_per_s == sim.goodput_req_per_s
    assert summary.meets_slo is sim.slo_met is met
    assert summary.window_s == sim.window_s
    assert summary.backlog_growing is sim.backlog_growing is False
    assert summary.num_good == sim.slo_report.num_good


def test_both_paths_call_the_one_function(monkeypatch):
    assert pdtrt.bench.stats.evaluate_slo is pdtrt.workload.slo.evaluate_slo
    assert pdtrt.sim.metrics.evaluate_slo is pdtrt.workload.slo.evaluate_slo
    calls = []
    real = pdtrt.workload.slo.backlog_growing

    def spy(outcomes):
        calls.append(len(outcomes))
        return real(outcomes)

    monkeypatch.setattr(pdtrt.workload.slo, "backlog_growing", spy)
    slo = SLO(ttft_ms=200, itl_ms=20)
    summarize(bench_records(), slo=slo)
    assert sim_result(slo).slo_met is False
    assert calls == [len(ROWS), len(ROWS)]
