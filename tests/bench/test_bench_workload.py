"""Bench's requests: seeded per index, the same lengths as the simulator's, traces cycled;
records CSV. (Length syntax, trace files and arrivals: tests/workload.)"""

from __future__ import annotations

import pytest

from pdtrt.bench import RequestPlan, RequestRecord, parse_length, read_csv, read_trace, write_csv
from pdtrt.client.types import ErrorKind
from pdtrt.sim.workload import SimWorkload, generate_requests


def test_request_i_is_seeded_per_index():
    w = RequestPlan(isl=parse_length("uniform:5:50"), osl=parse_length("uniform:1:9"), seed=3)
    a = w.request(4)
    assert a == w.request(4) and a != w.request(5)
    assert a != RequestPlan(isl=w.isl, osl=w.osl, seed=4).request(4)
    assert len(a.prompt.split()) == a.input_tokens and 5 <= a.input_tokens <= 50


def test_bench_sends_the_lengths_the_simulator_simulates():
    isl, osl = parse_length("uniform:5:500"), parse_length("normal:40:10")
    bench = RequestPlan(isl=isl, osl=osl, seed=11)
    sim = generate_requests(SimWorkload(isl=isl, osl=osl, rate_per_s=1.0), 11, 20)
    assert [(r.input_tokens, r.max_tokens) for r in map(bench.request, range(20))] == [
        (s.isl, s.osl) for s in sim]


def test_dataset_cycles_and_keeps_its_max_tokens(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a b c", "max_tokens": 5}\n\n{"prompt": "d"}\n'
                    '{"isl": 4, "osl": 2}\n')
    w = RequestPlan(isl=parse_length("1"), osl=parse_length("9"), dataset=read_trace(path))
    got = [(w.request(i).prompt, w.request(i).max_tokens, w.request(i).input_tokens)
           for i in range(4)]
    assert got[:2] == [("a b c", 5, 3), ("d", 9, 1)] and got[3] == got[0]
    assert got[2][1:] == (2, 4) and len(got[2][0].split()) == 4  # synthesised from isl


def test_records_csv_round_trip(tmp_path):
    records = [
        RequestRecord(index=0, model="m", request_id="r0", warmup=False, scheduled_s=0.5,
                      send_s=0.501, token_times_s=(0.6, 0.61), end_s=0.62, input_tokens=3,
                      max_tokens=2),
        RequestRecord(index=-1, model="m", request_id="w", warmup=True, scheduled_s=None,
                      send_s=-1.0, token_times_s=(), end_s=-0.5, input_tokens=3, max_tokens=2,
                      error="bad, \"quoted\"", error_kind=ErrorKind.REQUEST),
    ]
    path = write_csv(records, tmp_path / "r.csv")
    assert read_csv(path) == records


def test_a_record_of_multi_token_responses_counts_and_spreads_per_token(tmp_path):
    """Responses of 1, 3 and 4 tokens (stream_interval 4): 8 output tokens, 7 ITL samples of
    the response gap / its tokens, TPOT their mean; the CSV keeps the counts."""
    record = RequestRecord(index=0, model="ensemble", request_id="r", warmup=False,
                           scheduled_s=None, send_s=0.0, token_times_s=(0.1, 0.4, 0.8),
                           end_s=0.8, input_tokens=5, max_tokens=8,
                           tokens_per_response=(1, 3, 4))
    assert record.output_tokens == 8
    assert record.itls_s == pytest.approx((0.1,) * 7)
    assert record.tpot_s == pytest.approx(0.1)
    assert read_csv(write_csv([record], tmp_path / "r.csv")) == [record]
    one_each = RequestRecord(index=1, model="ensemble", request_id="s", warmup=False,
                             scheduled_s=None, send_s=0.0, token_times_s=(0.1, 0.4),
                             end_s=0.4, input_tokens=5, max_tokens=2)
    assert (one_each.output_tokens, one_each.itls_s) == (2, pytest.approx((0.3,)))
    not_streamed = RequestRecord(index=2, model="ensemble", request_id="t", warmup=False,
                                 scheduled_s=None, send_s=0.0, token_times_s=(0.9,),
                                 end_s=0.9, input_tokens=5, max_tokens=8,
                                 tokens_per_response=(8,))
    assert (not_streamed.output_tokens, not_streamed.itls_s, not_streamed.tpot_s) == (
        8, (), None)
