"""Small closed- and open-loop runs against the real Triton server (fake_llm test fixture)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from fake_llm_server import needs_triton, start_fake_llm_server

from pdtrt.bench import SLO, BenchConfig, LoopKind, RequestPlan, parse_length, run_bench
from pdtrt.bench.outputs import write_report
from pdtrt.bench.records import read_csv
from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.errors import ServerUnavailableError

pytestmark = needs_triton

WORKLOAD = RequestPlan(isl=parse_length("uniform:4:32"), osl=parse_length("uniform:2:12"), seed=5)


def _accounted(run, num_requests):
    measured = [r for r in run.records if not r.warmup]
    assert [r.index for r in measured] == list(range(num_requests))
    assert all(r.ok for r in measured), [r.error for r in measured if r.error]
    assert [r.output_tokens for r in measured] == [r.max_tokens for r in measured]
    s = run.summary
    assert s.num_ok == num_requests and s.output_tokens == s.requested_tokens
    assert s.itl_ms.count == sum(r.output_tokens - 1 for r in measured)


def test_closed_loop_run_and_report_files(llm_server, tmp_path):
    config = BenchConfig(loop=LoopKind.CLOSED, concurrency=4, num_requests=12, num_warmup=2,
                         workload=WORKLOAD, slo=SLO(ttft_ms=5000, itl_ms=5000))
    with LLMClient(llm_server) as client:
        report = run_bench(client, config)
        assert client.num_open_streams <= 4
    (run,) = report.runs
    _accounted(run, 12)
    assert sum(r.warmup for r in run.records) == 2
    assert run.summary.meets_slo is True and run.summary.slo_attainment == 1.0
    files = write_report(report, tmp_path / "out")
    data = json.loads(files.json.read_text())
    assert data["runs"][0]["summary"]["num_ok"] == 12 and data["config"]["loop"] == "closed"
    back = read_csv(files.csvs[0])
    assert [(r.index, r.request_id, r.output_tokens) for r in back] == [
        (r.index, r.request_id, r.output_tokens) for r in run.records]
    assert [r.ttft_s for r in back] == pytest.approx([r.ttft_s for r in run.records], abs=1e-5)
    assert all(r.end_s < 0 for r in back if r.warmup)  # warm-up ends before the measured start
    names = sorted(p.name for p in files.plots)
    assert names == ["itl_cdf.png", "token_timeline.png", "ttft_cdf.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in files.plots)


def test_open_loop_compare_runs_both_models_on_one_schedule(llm_server):
    config = BenchConfig(models=("ensemble", "ensemble_aggregated"), rates_per_s=(40.0,),
                         num_requests=15, workload=WORKLOAD)
    with LLMClient(llm_server) as client:
        report = run_bench(client, config)
    a, b = report.runs
    for run in report.runs:
        _accounted(run, 15)
    assert [r.scheduled_s for r in a.records] == [r.scheduled_s for r in b.records]
    assert {r.model for r in b.records} == {"ensemble_aggregated"}



def test_server_dying_mid_run_ends_the_run_with_clean_errors(tmp_path):
    server = start_fake_llm_server(tmp_path)
    assert server.endpoints is not None
    url = server.endpoints.grpc_url
    # a crash, not a stop: TritonServer.stop now lets requests in flight finish first
    killer = threading.Timer(0.7, os.killpg, args=(server._proc.pid, signal.SIGKILL))
    killer.start()
    config = BenchConfig(loop=LoopKind.CLOSED, concurrency=4, num_requests=40, timeout_s=10,
                         workload=RequestPlan(isl=parse_length("4"), osl=parse_length("50")))
    start = time.monotonic()
    try:
        with LLMClient(url) as client:
            report = run_bench(client, config)
    finally:
        killer.join()
        server.stop()
    assert time.monotonic() - start < 8  # no request waited for its 10 s timeout
    s = report.runs[0].summary
    assert s.num_requests == 40 and s.num_errors > 0 and s.num_ok + s.num_errors == 40
    kinds = {r.error_kind: r.error for r in report.runs[0].records if r.error}
    # a stopping Triton first unloads its models ("Request for unknown model"), then goes
    assert set(kinds) <= {"unavailable", "request"} and kinds, kinds
    with LLMClient(url) as client, pytest.raises(ServerUnavailableError):
        client.generate(GenerateRequest(prompt="x"))


def test_a_conversation_trace_on_the_real_server(llm_server, tmp_path):
    """Two chats of three turns, two users: every turn is answered, the later turns carry the
    conversation so far (more input tokens each turn), and the report and CSV say which turn
    each request was."""
    from pdtrt.workload import read_trace

    path = tmp_path / "chats.jsonl"
    path.write_text("".join(
        json.dumps({"conversation_id": c, "think_s": 0.05, "prompt": f"turn {t} of chat {c}",
                    "max_tokens": 4}) + "\n" for c in ("x", "y") for t in range(3)))
    workload = RequestPlan(isl=parse_length("4"), osl=parse_length("4"),
                           dataset=read_trace(path))
    config = BenchConfig(loop=LoopKind.CLOSED, concurrency=2, num_requests=6,
                         workload=workload)
    with LLMClient(llm_server) as client:
        report = run_bench(client, config)
    (run,) = report.runs
    assert all(r.ok for r in run.records), [r.error for r in run.records]
    by_chat = {c: sorted((r for r in run.records if r.conversation == c), key=lambda r: r.turn)
               for c in ("x", "y")}
    for records in by_chat.values():
        assert [r.turn for r in records] == [0, 1, 2]
        assert records[0].input_tokens < records[1].input_tokens < records[2].input_tokens
        assert records[1].send_s >= records[0].end_s + 0.05  # after the answer and think time
    assert run.summary.ttft_later_turns_ms.count == 4
    files = write_report(report, tmp_path / "out")
    assert {(r.conversation, r.turn) for r in read_csv(files.csvs[0])} == {
        (c, t) for c in ("x", "y") for t in range(3)}
