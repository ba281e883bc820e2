"""The open/closed-loop runner over the fake transport with a manual clock."""

from __future__ import annotations

import pytest
from fake_transport import FakeHub, words_script

from pdtrt.bench import SLO, LoopKind, RequestPlan, RunPlan, parse_length, run_plan
from pdtrt.bench.bench import BenchConfig, run_bench
from pdtrt.client import LLMClient, StreamEvent
from pdtrt.client.types import ErrorKind
from pdtrt.errors import BenchError

WORKLOAD = RequestPlan(isl=parse_length("8"), osl=parse_length("uniform:1:6"), seed=1)


def _client(hub):
    return LLMClient("fake", transport_factory=hub, clock=hub.clock)


def test_open_loop_sends_on_schedule_and_accounts_for_every_request():
    hub = FakeHub(words_script(delay_s=0.001))
    plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.OPEN,
                   arrivals_s=(0.0, 0.5, 0.7, 2.0), num_warmup=2)
    with _client(hub) as client:
        records = run_plan(client, plan, clock=hub.clock, sleep=hub.clock.advance)
    warm, measured = records[:2], records[2:]
    assert [r.index for r in warm] == [-1, -2] and all(r.warmup for r in warm)
    assert [r.index for r in measured] == [0, 1, 2, 3]
    assert [r.scheduled_s for r in measured] == [0.0, 0.5, 0.7, 2.0]
    assert all(r.lag_s == pytest.approx(0.0) for r in measured)
    assert [r.output_tokens for r in measured] == [r.max_tokens for r in measured] == [
        WORKLOAD.request(i).max_tokens for i in range(4)]


def test_open_loop_never_drops_late_sends():
    hub = FakeHub(words_script(delay_s=1.0))  # each request takes ~seconds, synchronously
    plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.OPEN,
                   arrivals_s=(0.0, 0.1, 0.2))
    with _client(hub) as client:
        records = run_plan(client, plan, clock=hub.clock, sleep=hub.clock.advance)
    assert len(records) == 3 and records[1].lag_s > 0.5  # late, recorded, still sent


def test_closed_loop_bounds_by_count_and_by_duration():
    hub = FakeHub(words_script(delay_s=0.1))
    with _client(hub) as client:
        plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.CLOSED,
                       concurrency=3, num_requests=7)
        assert len(run_plan(client, plan, clock=hub.clock)) == 7
        plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.CLOSED,
                       concurrency=2, duration_s=2.0)
        records = run_plan(client, plan, clock=hub.clock)
    assert 0 < len(records) < 10 and all(r.send_s < 2.0 for r in records)


def test_errors_are_recorded_not_raised():
    def sometimes(model, tensors, request_id):
        if request_id.endswith("-1"):
            return [(0.01, StreamEvent(error="boom", final=True))]
        return words_script(0.01)(model, tensors, request_id)

    hub = FakeHub(sometimes)
    plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.CLOSED, num_requests=3)
    with _client(hub) as client:
        records = run_plan(client, plan, clock=hub.clock)
    assert [r.error for r in records] == [None, "boom", None]
    assert [r.error_kind for r in records] == [None, ErrorKind.REQUEST, None]


def test_plan_needs_a_bound_and_users():
    with pytest.raises(BenchError, match="needs a bound"):
        RunPlan(model="m", workload=WORKLOAD, loop=LoopKind.CLOSED)
    with pytest.raises(BenchError, match="concurrency must be >= 1"):
        RunPlan(model="m", workload=WORKLOAD, loop=LoopKind.CLOSED, num_requests=1,
                concurrency=0)
    with pytest.raises(BenchError, match="needs a bound"):
        BenchConfig(workload=WORKLOAD)


def test_compare_and_sweep_share_requests_and_schedule():
    hub = FakeHub(words_script(delay_s=0.01), models={"a": dict(FakeHub().models["ensemble"]),
                                                      "b": dict(FakeHub().models["ensemble"])})
    config = BenchConfig(models=("a", "b"), rates_per_s=(1.0, 2.0), num_requests=5,
                         workload=WORKLOAD, slo=SLO(ttft_ms=1000, itl_ms=1000))
    with _client(hub) as client:
        report = run_bench(client, config, clock=hub.clock, sleep=hub.clock.advance)
    assert [r.label for r in report.runs] == ["a @ rate 1/s", "b @ rate 1/s", "a @ rate 2/s",
                                              "b @ rate 2/s"]
    a1, b1, a2, _ = report.runs
    assert [r.scheduled_s for r in a1.records] == [r.scheduled_s for r in b1.records]
    assert [r.max_tokens for r in a1.records] == [r.max_tokens for r in a2.records]
    assert a2.records[-1].scheduled_s < a1.records[-1].scheduled_s  # faster rate
    assert report.best_rate_per_s("a") == 2.0 and report.is_sweep
    assert report.to_dict()["best_rate_per_s"] == {"a": 2.0, "b": 2.0}


def test_streams_are_opened_before_the_clock_starts():
    hub = FakeHub(words_script(delay_s=0.01))
    with _client(hub) as client:
        plan = RunPlan(model="ensemble", workload=WORKLOAD, loop=LoopKind.CLOSED,
                       concurrency=5, num_requests=2)
        run_plan(client, plan, clock=hub.clock)
        assert client.num_open_streams == 5
        # open loop at 10/s, warm-up E2E 6 x 0.01 s: ceil(10 * 2 * 0.06) + 8 = 10 streams
        fixed = RequestPlan(isl=parse_length("8"), osl=parse_length("6"))
        plan = RunPlan(model="ensemble", workload=fixed, loop=LoopKind.OPEN, num_warmup=1,
                       arrivals_s=tuple(i / 10 for i in range(40)))
        run_plan(client, plan, clock=hub.clock, sleep=hub.clock.advance)
        assert client.num_open_streams == 10
