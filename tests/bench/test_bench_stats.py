"""Statistics on synthetic records: ITL vs TPOT, goodput, windows, cost."""

from __future__ import annotations

import pytest

from pdtrt.bench import SLO, RequestRecord, summarize


def rec(index, send_s, token_times_s, *, end_s=None, error=None, warmup=False, max_tokens=None,
        scheduled_s=None):
    return RequestRecord(index=index, model="m", request_id=str(index), warmup=warmup,
                         scheduled_s=scheduled_s, send_s=send_s,
                         token_times_s=tuple(token_times_s),
                         end_s=end_s if end_s is not None else (token_times_s or [send_s])[-1],
                         input_tokens=10, max_tokens=max_tokens or len(token_times_s),
                         error=error)


def test_itl_pools_gaps_tpot_is_per_request():
    # request a: 3 tokens 10 ms apart after a 100 ms TTFT; b: 2 tokens 40 ms apart
    a = rec(0, 0.0, [0.100, 0.110, 0.120])
    b = rec(1, 0.0, [0.050, 0.090])
    s = summarize([a, b])
    assert s.ttft_ms.mean == pytest.approx(75.0)
    assert s.itl_ms.count == 3 and s.itl_ms.mean == pytest.approx(20.0)  # (10+10+40)/3
    assert s.tpot_ms.count == 2 and s.tpot_ms.mean == pytest.approx(25.0)  # (10+40)/2
    assert s.e2e_ms.max == pytest.approx(120.0)


def test_one_token_request_has_ttft_but_no_tpot():
    s = summarize([rec(0, 0.0, [0.02])])
    assert s.ttft_ms.count == 1 and s.tpot_ms.count == 0 and s.itl_ms.count == 0


def test_window_throughput_and_warmup_excluded():
    records = [rec(-1, -5.0, [-4.0, -3.0], warmup=True),
               rec(0, 0.0, [0.5, 1.0]), rec(1, 1.0, [1.5, 2.0], end_s=2.0)]
    s = summarize(records)
    assert s.num_requests == 2 and s.window_s == pytest.approx(2.0)
    assert s.output_tokens == 4 and s.output_tok_per_s == pytest.approx(2.0)
    assert s.request_per_s == pytest.approx(1.0)


def test_errors_counted_not_measured():
    records = [rec(0, 0.0, [0.1, 0.2]), rec(1, 0.0, [0.1], end_s=0.5, error="boom",
                                              max_tokens=4)]
    s = summarize(records)
    assert (s.num_ok, s.num_errors) == (1, 1)
    assert s.output_tokens == 2 and s.requested_tokens == 6 and s.ttft_ms.count == 1
    assert s.errors_by_kind == {"unknown": 1}


def test_goodput_uses_ttft_and_per_request_tpot():
    fast = rec(0, 0.0, [0.05, 0.06, 0.07])  # TTFT 50, TPOT 10
    slow_first = rec(1, 0.0, [0.30, 0.31])  # TTFT 300
    slow_tokens = rec(2, 0.0, [0.05, 0.15])  # TPOT 100
    failed = rec(3, 0.0, [0.05], error="x")
    slo = SLO(percentile=50, ttft_ms=100, itl_ms=20)
    s = summarize([fast, slow_first, slow_tokens, failed], slo=slo)
    assert s.num_good == 1 and s.slo_attainment == pytest.approx(0.25)
    assert s.goodput_req_per_s == pytest.approx(1 / 0.31) and s.meets_slo is False
    s = summarize([fast, fast, slow_first], slo=slo)
    assert s.slo_attainment == pytest.approx(2 / 3) and s.meets_slo is True
    assert summarize([fast], slo=SLO()).meets_slo is None
    assert summarize([], slo=slo).meets_slo is None and summarize([], slo=slo).num_good == 0


def test_a_run_whose_ttft_keeps_growing_does_not_meet_the_slos():
    # every request within a generous TTFT, but each waits longer than the one before
    growing = [rec(i, i * 0.1, [i * 0.1 + 0.05 + 0.05 * i, i * 0.1 + 0.06 + 0.05 * i])
               for i in range(30)]
    s = summarize(growing, slo=SLO(ttft_ms=60_000, itl_ms=1000))
    assert s.slo_attainment == 1.0 and s.backlog_growing and s.meets_slo is False


def test_cost_per_million_output_tokens():
    # 1000 tokens over 1 s = 1000 tok/s = 3.6 M tok/h; at $7.2/h -> $2 per M tokens
    records = [rec(0, 0.0, [i / 1000 for i in range(1, 1001)])]
    s = summarize(records, cost_per_hour_usd=7.2)
    assert s.output_tok_per_s == pytest.approx(1000.0)
    assert s.cost_per_mtok_usd == pytest.approx(2.0)
    assert summarize(records).cost_per_mtok_usd is None


def test_send_lag_from_schedule():
    s = summarize([rec(0, 0.010, [0.1], scheduled_s=0.0), rec(1, 1.0, [1.1], scheduled_s=1.0)])
    assert s.lag_ms.max == pytest.approx(10.0) and s.lag_ms.min == pytest.approx(0.0)
