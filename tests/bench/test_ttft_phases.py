"""The server's TTFT by phase in a benchmark: asked of the model that takes the question, kept
per request, written to the CSV and back, summarised per column, plotted per percentile."""

from __future__ import annotations

import json

import pytest
from fake_transport import ENSEMBLE_INPUTS, FakeHub
from rich.console import Console

from pdtrt.bench import RequestPlan, RequestRecord, parse_length, read_csv
from pdtrt.bench.bench import BenchConfig, run_bench
from pdtrt.bench.outputs import write_report
from pdtrt.bench.records import CSV_FIELDS, SERVER_TIMING_FIELDS
from pdtrt.bench.ttft_phases import phase_dists, request_at, timed
from pdtrt.cli.bench_render import _side_by_side
from pdtrt.client import LLMClient, StreamEvent
from pdtrt.client.timing import ServerTiming
from pdtrt.engine_io import TIMING_INPUT
from pdtrt.enums import Percentile

WORKLOAD = RequestPlan(isl=parse_length("8"), osl=parse_length("3"), seed=1)


def _timing(ttft_ms: float) -> ServerTiming:
    """A disaggregated request without early_first_token: every phase counts."""
    return ServerTiming(ttft_ms=ttft_ms, queue_ms=0.1 * ttft_ms, prefill_ms=0.4 * ttft_ms,
                        decode_queue_ms=0.1 * ttft_ms, kv_transfer_ms=0.3 * ttft_ms,
                        first_decode_ms=0.1 * ttft_ms, path="disaggregated")


def _record(index: int, timing: ServerTiming | None, *, ok: bool = True) -> RequestRecord:
    return RequestRecord(index=index, model="m", request_id=str(index), warmup=False,
                         scheduled_s=None, send_s=0.0, token_times_s=(0.1, 0.2), end_s=0.2,
                         input_tokens=8, max_tokens=2, error=None if ok else "boom",
                         server_timing=timing)


def test_phase_percentiles_per_column_over_the_timed_requests_only():
    records = [_record(i, _timing(10.0 * (i + 1))) for i in range(10)]
    records += [_record(10, None), _record(11, _timing(999.0), ok=False)]
    dists = phase_dists(records)
    assert list(dists) == list(SERVER_TIMING_FIELDS)
    assert dists["server_ttft_ms"].count == 10 and dists["server_ttft_ms"].max == 100.0
    assert dists["prefill_ms"].p50 == pytest.approx(0.4 * dists["server_ttft_ms"].p50)
    assert phase_dists([_record(0, None)]) is None


@pytest.mark.parametrize(("pct", "ttft_ms"), [(Percentile.P50, 50.0), (Percentile.P90, 90.0),
                                              (Percentile.P99, 100.0)], ids=str)
def test_the_bar_is_the_request_at_the_percentile_by_nearest_rank(pct, ttft_ms):
    timings = [_timing(10.0 * k) for k in (7, 3, 10, 1, 5, 9, 2, 8, 4, 6)]
    at = request_at(timings, pct)
    assert at.ttft_ms == ttft_ms
    assert sum(at.phases_ms.values()) == pytest.approx(at.ttft_ms)  # one real request


def _script(model, tensors, request_id):
    """Three tokens; the final response carries the timing, and no text, when asked for."""
    asked = any(t.name == TIMING_INPUT for t in tensors)
    text = json.dumps({"ttft_ms": 10.0, "queue_ms": 1.0, "prefill_ms": 9.0,
                       "decode_queue_ms": 0.0, "kv_transfer_ms": 0.0, "first_decode_ms": 0.0,
                       "path": "disaggregated"}) if asked else None
    return [*((0.01, StreamEvent(text=f" w{i}")) for i in range(3)),
            (0.0, StreamEvent(text="" if asked else None, timing=text, final=True))]


def test_a_compare_times_the_model_that_answers_and_writes_columns_plot_and_json(tmp_path):
    hub = FakeHub(_script, models={"ensemble": {**ENSEMBLE_INPUTS, TIMING_INPUT: "BOOL"},
                                   "ensemble_aggregated": ENSEMBLE_INPUTS})
    config = BenchConfig(models=("ensemble", "ensemble_aggregated"), rates_per_s=(5.0,),
                         num_requests=4, workload=WORKLOAD)
    with LLMClient("fake", transport_factory=hub, clock=hub.clock) as client:
        report = run_bench(client, config, clock=hub.clock, sleep=hub.clock.advance)
    disagg, agg = report.runs
    assert [r.output_tokens for r in disagg.records] == [3] * 4
    assert [r.server_timing.prefill_ms for r in disagg.records] == [9.0] * 4
    assert timed(agg.records) == [] and agg.summary.ttft_phases_ms is None
    assert disagg.summary.ttft_phases_ms["queue_ms"].p99 == 1.0

    files = write_report(report, tmp_path)
    data = json.loads(files.json.read_text())
    phases = data["runs"][0]["summary"]["ttft_phases_ms"]
    assert {k: phases[k]["p50"] for k in SERVER_TIMING_FIELDS} == {
        "server_ttft_ms": 10.0, "queue_ms": 1.0, "prefill_ms": 9.0, "decode_queue_ms": 0.0,
        "kv_transfer_ms": 0.0, "first_decode_ms": 0.0}
    assert "ttft_phases_ms" not in data["runs"][1]["summary"]
    assert "ttft_phases.png" in data["files"]["plots"]
    png = tmp_path / "ttft_phases.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    header = files.csvs[0].read_text().splitlines()[0].split(",")
    assert header == list(CSV_FIELDS) and header[-8:] == [*SERVER_TIMING_FIELDS, "server_path",
                                                          "tokens_per_response"]
    back = read_csv(files.csvs[0])
    assert [r.server_timing for r in back] == [r.server_timing for r in disagg.records]
    assert all(r.server_timing is None for r in read_csv(files.csvs[1]))

    console = Console(record=True, width=200)
    console.print(_side_by_side(report))
    lines = [x for x in console.export_text().splitlines() if "server " in x]
    assert [x.split("│")[1].strip() for x in lines][:3] == [
        "server ttft p50 (ms)", "server ttft p90 (ms)", "server ttft p99 (ms)"]
    assert len(lines) == 18
    assert [c.strip() for c in lines[4].split("│")[2:4]] == ["1.0", "-"]  # queue p90
