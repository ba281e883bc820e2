"""A routed request's OpenTelemetry spans (pdtrt.runtime.router.trace), on the fake seam with a
clock the phases move, exported by the real SDK to a real OTLP receiver: the router's span under
the caller's traceparent, a span per phase call whose traceparent the phase model gets, and the
timeline's queue and KV-transfer spans."""

from __future__ import annotations

import pytest

from pdtrt.engine_io import TRACEPARENT_PARAMETER
from tests.otlp_receiver import OtlpReceiver
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import Fail, FakeRequest, tokens_out
from tests.runtime.test_router_model import OUTPUT, PARAMS, engines, new_router, request, route

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"
TP = f"00-{TRACE}-{CALLER}-01"


def _traced(req: FakeRequest) -> FakeRequest:
    req.parameters[TRACEPARENT_PARAMETER] = TP
    return req


@pytest.fixture
def receiver(monkeypatch):
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rx.endpoint)
        yield rx


def _spans(rx, model, count):
    model.finalize()  # flushes the exporter: nothing is left in its queue
    spans = rx.wait_for(lambda s: len(s) >= count, timeout_s=5)
    assert len(spans) == count, [s.name for s in spans]
    return {s.name: s for s in spans}


def test_a_disaggregated_request_is_one_trace_of_router_calls_and_timeline(receiver):
    clock = FakeClock()

    def prefill(call):
        clock.advance(0.2)
        yield tokens_out(OUTPUT[0], context_phase_params=PARAMS)

    def decode(call):
        clock.advance(0.05)  # the KV pull before the first response
        yield tokens_out(OUTPUT[0])
        for t in OUTPUT[1:]:
            clock.advance(0.01)
            yield tokens_out(t)

    model, triton = new_router(engines(prefill=prefill, decode=decode), clock=clock)
    req = _traced(request(prompt_len=5, max_new=4))
    route(model, req)
    assert req.tokens == OUTPUT
    spans = _spans(receiver, model, 5)
    router, pcall, dcall = spans["router"], spans["prefill call"], spans["decode call"]
    queue, kv = spans["queue"], spans["kv_transfer"]
    assert {s.trace_id for s in spans.values()} == {TRACE}
    assert {s.service for s in spans.values()} == {"pdtrt-router"}
    assert router.parent_span_id == CALLER
    assert pcall.parent_span_id == dcall.parent_span_id == queue.parent_span_id \
        == router.span_id
    assert kv.parent_span_id == dcall.span_id
    # each phase model got its call span as its parent
    (p,), (d,) = triton.calls_to("prefill"), triton.calls_to("decode")
    assert p.parameters[TRACEPARENT_PARAMETER] == f"00-{TRACE}-{pcall.span_id}-01"
    assert d.parameters[TRACEPARENT_PARAMETER] == f"00-{TRACE}-{dcall.span_id}-01"
    assert pcall.attributes == {"pdtrt.endpoint": "prefill",
                                "pdtrt.request_type": "context_only"}
    assert dcall.attributes["pdtrt.request_type"] == "generation_only"
    # the timeline's marks, not a second timing
    assert kv.duration_s == pytest.approx(0.05)
    assert router.duration_s == pytest.approx(0.28)
    a = router.attributes
    assert a["pdtrt.request_id"] == "r1" and a["pdtrt.path"] == "remote"
    assert a["pdtrt.input_tokens"] == 5 and a["pdtrt.output_tokens"] == 4
    assert a["pdtrt.ttft_ms"] == pytest.approx(200.0) and a["pdtrt.prefill_ms"] == \
        pytest.approx(200.0)
    assert a["pdtrt.migrations"] == 0 and router.status_code == 0


def _slow_after_final(triton, clock, seconds):
    """Each final response (tokens, error or empty) takes the stub ``seconds`` after it went
    out: the caller may have it, and end its own span, well before the router is done."""
    def late(sent, final_by_default):
        def send(*args, **kwargs):
            sent(*args, **kwargs)
            if kwargs.get("final", final_by_default):
                clock.advance(seconds)
        return send

    triton.send = late(triton.send, False)
    triton.send_error = late(triton.send_error, True)
    triton.close = late(triton.close, True)


@pytest.mark.parametrize("fails", [False, True], ids=["tokens", "error"])
def test_the_router_span_ends_when_its_final_response_went_out(receiver, fails):
    clock = FakeClock()

    def decode(call):
        clock.advance(0.05)
        yield Fail("boom") if fails else tokens_out(OUTPUT)

    model, triton = new_router(engines(decode=decode), clock=clock)
    _slow_after_final(triton, clock, 1.0)
    req = _traced(request(max_new=len(OUTPUT)))
    route(model, req)
    assert bool(req.errors) == fails
    model.finalize()
    spans = receiver.wait_for(lambda s: "router" in {x.name for x in s}, timeout_s=5)
    router = next(s for s in spans if s.name == "router")
    assert router.duration_s == pytest.approx(0.05)  # not the second after it


def test_a_request_without_a_traceparent_starts_its_own_trace(receiver):
    model, triton = new_router(engines())
    route(model, request())
    spans = _spans(receiver, model, 5)
    assert spans["router"].parent_span_id == "" and spans["router"].trace_id != TRACE
    assert len({s.trace_id for s in spans.values()}) == 1


def test_a_failed_request_and_its_failed_call_are_errors(receiver):
    model, triton = new_router(engines(decode=lambda call: [Fail("boom")]))
    req = _traced(request())
    route(model, req)
    assert req.errors
    model.finalize()
    spans = receiver.wait_for(lambda s: {"router", "decode call"} <= {x.name for x in s},
                              timeout_s=5)
    by_name = {s.name: s for s in spans}
    assert by_name["router"].status_code == 2 and "boom" in by_name["router"].status_message
    assert by_name["decode call"].status_code == 2
    assert by_name["decode call"].status_message == "boom"
    assert by_name["prefill call"].status_code == 0


def test_without_an_endpoint_nothing_is_traced_or_passed_on(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    model, triton = new_router(engines())
    route(model, _traced(request()))
    model.finalize()
    assert model.tracing is None
    assert all(TRACEPARENT_PARAMETER not in c.parameters for c in triton.calls)
