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


def test_ignore_eos_reaches_every_request_of_the_run():
    inputs = {**FakeHub().models["ensemble"], "end_id": "INT32"}
    hub = FakeHub(words_script(delay_s=0.01), models={"ensemble": inputs})
    config = BenchConfig(loop=LoopKind.CLOSED, num_requests=2, num_warmup=1, ignore_eos=True,
                         workload=WORKLOAD)
    with _client(hub) as client:
        report = run_bench(client, config, clock=hub.clock, sleep=hub.clock.advance)
    sent = [dict((t.name, t.values[0]) for t in tensors)
            for transport in hub.transports for _, tensors, _ in transport.sent]
    assert len(sent) == 3 and all(s["end_id"] == -1 for s in sent)
    assert report.to_dict()["config"]["ignore_eos"] is True


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


def _chat_trace(tmp_path):
    from pdtrt.workload import read_trace

    path = tmp_path / "chats.jsonl"
    path.write_text(
        '{"conversation_id": "a", "prompt": "hello there", "max_tokens": 2}\n'
        '{"conversation_id": "b", "prompt": "other chat", "max_tokens": 1}\n'
        '{"conversation_id": "a", "turn": 2, "think_s": 0.01, "prompt": "and last", '
        '"max_tokens": 1}\n'
        '{"conversation_id": "a", "turn": 1, "think_s": 0.01, "prompt": "then this", '
        '"max_tokens": 3}\n')
    return read_trace(path)


def test_conversations_send_each_turn_with_the_conversation_so_far(tmp_path):
    seen: list[tuple[str, str]] = []
    words = words_script(0.001)

    def script(model, tensors, request_id):
        seen.append((request_id, next(t.values[0] for t in tensors if t.name == "text_input")))
        return words(model, tensors, request_id)

    hub = FakeHub(script)
    workload = RequestPlan(isl=parse_length("8"), osl=parse_length("4"),
                           dataset=_chat_trace(tmp_path))
    plan = RunPlan(model="ensemble", workload=workload, loop=LoopKind.CLOSED, concurrency=1,
                   num_requests=5)
    with _client(hub) as client:
        records = run_plan(client, plan, clock=hub.clock)
    prompts = [p.decode() if isinstance(p, bytes) else p for _, p in seen]
    # conversation a in turn order (its turns 1 and 2 given out of file order), then b
    assert prompts[0] == "hello there"
    assert prompts[1] == "hello there\n w0 w1\nthen this"
    assert prompts[2] == "hello there\n w0 w1\nthen this\n w0 w1 w2\nand last"
    assert prompts[3:] == ["other chat", "hello there"]  # b, then a again: the bound is 5
    assert [(r.conversation, r.turn) for r in records] == [
        ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("a", 0)]
    assert [r.input_tokens for r in records][:3] == [2, 6, 11]  # words of what was sent
    from pdtrt.bench.stats import summarize

    summary = summarize(records)
    assert summary.ttft_first_turn_ms.count == 3 and summary.ttft_later_turns_ms.count == 2
    assert "ttft_later_turns_ms" in summary.to_dict()
    assert "ttft_later_turns_ms" not in summarize(records[:0]).to_dict()


def test_a_failed_turn_ends_its_conversation(tmp_path):
    def script(model, tensors, request_id):
        text = next(t.values[0] for t in tensors if t.name == "text_input")
        text = text.decode() if isinstance(text, bytes) else text
        if text.endswith("then this"):
            return [(0.001, StreamEvent(error="boom", final=True))]
        return words_script(0.001)(model, tensors, request_id)

    hub = FakeHub(script)
    workload = RequestPlan(isl=parse_length("8"), osl=parse_length("4"),
                           dataset=_chat_trace(tmp_path))
    plan = RunPlan(model="ensemble", workload=workload, loop=LoopKind.OPEN,
                   arrivals_s=(0.0,), num_requests=10)
    with _client(hub) as client:
        records = run_plan(client, plan, clock=hub.clock, sleep=hub.clock.advance)
    assert [(r.conversation, r.turn, r.ok) for r in records] == [
        ("a", 0, True), ("a", 1, False)]  # turn 2 is never sent
