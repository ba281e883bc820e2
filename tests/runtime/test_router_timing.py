"""One request's timing, returned when asked (pdtrt.runtime.router.timing): the phases of its
time to first token sum to it, on the fake seam with a clock the phases move."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdtrt.engine_io import TIMING_INPUT, TIMING_OUTPUT
from pdtrt.prefill_policy import PrefillPath
from pdtrt.runtime.router.timeline import Timeline
from pdtrt.runtime.router.timing import TTFT_PHASES, request_timing, ttft_phases
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import tokens_out
from tests.runtime.test_router_model import OUTPUT, PARAMS, engines, request, route

DECODE_QUEUE_NS = 10_000_000  # what the decode engine reports as its own queue time


def _timed(**kwargs):
    req = request(**kwargs)
    req.inputs[TIMING_INPUT] = np.array([True])
    return req


def _timing(req) -> dict:
    """The timing the final response carries; no other response carries one. It has tokens,
    if none: the ensemble's postprocessing runs on every response and needs them."""
    carrying = [r for r in req.responses if TIMING_OUTPUT in r.outputs]
    assert len(carrying) == 1 and carrying[0].final, req.responses
    assert {"output_ids", "sequence_length"} <= set(carrying[0].outputs)
    return json.loads(carrying[0].outputs[TIMING_OUTPUT].reshape(-1)[0])


def _phased(clock):
    """Phases that take 0.2 s to prefill, 0.05 s to the decode's first response (its engine
    reporting 0.01 s of that as its queue) and 0.01 s per decode step."""
    def prefill(call):
        clock.advance(0.2)
        yield tokens_out(OUTPUT[0], context_phase_params=PARAMS)

    def decode(call):
        clock.advance(0.05)
        yield tokens_out(OUTPUT[0], arrival_time_ns=np.array([[1_000]]),
                         first_scheduled_time_ns=np.array([[1_000 + DECODE_QUEUE_NS]]))
        for t in OUTPUT[1:]:
            clock.advance(0.01)
            yield tokens_out(t)
    return engines(prefill=prefill, decode=decode)


def _sums_to_ttft(timing):
    return sum(timing[f"{name}_ms"] for name in TTFT_PHASES) == pytest.approx(
        timing["ttft_ms"], abs=0.01)


def test_with_early_first_token_the_ttft_is_queue_and_prefill(router):
    clock = FakeClock()
    model, _ = router(_phased(clock), clock=clock)
    req = _timed(max_new=4)
    route(model, req)
    assert req.tokens == OUTPUT
    final = req.responses[-1]  # every token went out before it: the timing and no token
    assert final.outputs["output_ids"].shape == (1, 1, 0)
    assert final.outputs["sequence_length"].tolist() == [[0]]
    timing = _timing(req)
    assert timing["ttft_ms"] == pytest.approx(200.0) and _sums_to_ttft(timing)
    assert timing["prefill_ms"] == pytest.approx(200.0)
    assert timing["kv_transfer_ms"] == timing["decode_queue_ms"] == 0.0  # after the token
    assert timing["path"] == "remote" and timing["output_tokens"] == 4
    # the decode's phases in full, though after the first token
    assert timing["phases_ms"] == pytest.approx({
        "queue": 0.0, "prefill": 200.0, "decode_queue": 10.0, "kv_transfer": 40.0,
        "first_decode": 10.0, "decode": 30.0})
    assert timing["e2e_ms"] == pytest.approx(280.0)


def test_with_the_first_token_from_the_decode_the_kv_transfer_is_in_the_ttft(router):
    clock = FakeClock()
    model, _ = router(_phased(clock), clock=clock, early_first_token="false")
    req = _timed(max_new=4)
    route(model, req)
    timing = _timing(req)
    assert timing["ttft_ms"] == pytest.approx(250.0) and _sums_to_ttft(timing)
    assert (timing["prefill_ms"], timing["decode_queue_ms"], timing["kv_transfer_ms"]) == \
        pytest.approx((200.0, 10.0, 40.0))


def test_a_non_streaming_request_gets_its_timing_with_the_whole_output(router):
    clock = FakeClock()
    model, _ = router(_phased(clock), clock=clock)
    req = _timed(max_new=4, streaming=False)
    route(model, req)
    timing = _timing(req)
    assert req.tokens == OUTPUT and _sums_to_ttft(timing)
    assert timing["ttft_ms"] == pytest.approx(timing["e2e_ms"])  # the whole answer at once


def test_the_aggregated_path_reports_queue_then_the_engine(router):
    clock = FakeClock()

    def aggregated(call):
        clock.advance(0.07)
        return [tokens_out(t) for t in OUTPUT]

    def phases(call):
        return [] if call.is_stop else aggregated(call)

    model, _ = router(phases, clock=clock, aggregated_model="aggregated",
                      aggregated_below_tokens="100")
    req = _timed()
    route(model, req)
    timing = _timing(req)
    assert timing["path"] == "aggregated" and _sums_to_ttft(timing)
    assert timing["prefill_ms"] == pytest.approx(70.0)
    assert "kv_transfer" not in timing["phases_ms"]


def test_no_timing_unless_asked(router):
    model, _ = router(engines())
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT
    assert not any(TIMING_OUTPUT in r.outputs for r in req.responses)


@pytest.mark.parametrize(("first_token_s", "expected"), [
    (0.31, {"queue": 0.01, "prefill": 0.3, "decode_queue": 0.0, "kv_transfer": 0.0,
            "first_decode": 0.0}),
    (0.6, {"queue": 0.01, "prefill": 0.39, "decode_queue": 0.02, "kv_transfer": 0.13,
           "first_decode": 0.05}),
], ids=["first-token-from-prefill", "first-token-from-decode"])
def test_the_phases_partition_the_time_to_first_token(first_token_s, expected):
    t = Timeline(arrived_s=0.0, first_call_s=0.01, prefill_sent_s=0.01, prefill_done_s=0.3,
                 decode_sent_s=0.4, decode_first_s=0.55, decode_queue_s=0.02,
                 path=PrefillPath.REMOTE)
    got = ttft_phases(t, first_token_s)
    assert got == pytest.approx(expected)
    assert sum(got.values()) == pytest.approx(first_token_s)
    t.first_token_s = first_token_s
    assert request_timing(t, now_s=1.0, num_out=3)["ttft_ms"] == pytest.approx(
        first_token_s * 1000)
