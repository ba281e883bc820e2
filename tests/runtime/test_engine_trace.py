"""An engine request's OpenTelemetry spans (pdtrt.runtime.engine.trace): the reference twin's
prefill and decode engine models on the fake seam, sharing one KV transceiver, exported by the
real SDK to a real OTLP receiver -- the decode's span has the KV transfer, with its bytes, as the
LLM API's request_perf_metrics report it."""

from __future__ import annotations

import pytest

from pdtrt.engine_io import TRACEPARENT_PARAMETER, RequestType, Role
from tests.otlp_receiver import OtlpReceiver
from tests.runtime.test_engine_model import ended_once, engine_model, request  # noqa: F401

TRACE = "5b8efff798038103d269b633813fc60c"
TP_PREFILL = f"00-{TRACE}-eee19b7ec3c1b174-01"
TP_DECODE = f"00-{TRACE}-eee19b7ec3c1b175-01"


@pytest.fixture
def receiver(monkeypatch):
    with OtlpReceiver() as rx:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rx.endpoint)
        yield rx


def _pd(engine_model, tp_prefill, tp_decode):  # noqa: F811 -- the fixture, passed on
    prefill, _ = engine_model(Role.PREFILL, kv=True)
    decode, _ = engine_model(Role.DECODE, kv=True)
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False)
    if tp_prefill:
        ctx.parameters[TRACEPARENT_PARAMETER] = tp_prefill
    prefill.execute([ctx])
    assert ended_once(ctx)
    gen = request(max_new=6, request_type=RequestType.GENERATION_ONLY,
                  context_phase_params=ctx.responses[0].outputs["context_phase_params"])
    if tp_decode:
        gen.parameters[TRACEPARENT_PARAMETER] = tp_decode
    decode.execute([gen])
    assert ended_once(gen)
    prefill.finalize()
    decode.finalize()  # flushes: the spans are out before the stub would end
    return gen, decode.transceiver.counts["pulled_bytes"]


def test_the_decode_span_holds_the_kv_transfer_with_its_bytes(engine_model,  # noqa: F811
                                                              receiver):
    gen, pulled_bytes = _pd(engine_model, TP_PREFILL, TP_DECODE)
    spans = {s.name: s for s in receiver.wait_for(lambda s: len(s) >= 3, timeout_s=5)}
    prefill, decode, kv = spans["prefill"], spans["decode"], spans["kv_transfer"]
    assert {s.trace_id for s in spans.values()} == {TRACE}
    assert prefill.parent_span_id == TP_PREFILL.split("-")[2]
    assert decode.parent_span_id == TP_DECODE.split("-")[2]
    assert kv.parent_span_id == decode.span_id
    assert (prefill.service, decode.service, kv.service) == \
        ("pdtrt-prefill", "pdtrt-decode", "pdtrt-decode")
    # the prompt's KV, as many bytes as the transceiver pulled for it
    assert kv.attributes["pdtrt.kv_transfer.bytes"] == pulled_bytes > 0
    assert decode.start_ns <= kv.start_ns <= kv.end_ns <= decode.end_ns
    assert decode.attributes["pdtrt.request_type"] == "generation_only"
    assert decode.attributes["pdtrt.output_tokens"] == len(gen.tokens) == 6
    assert prefill.attributes["pdtrt.request_type"] == "context_only"
    assert "kv_transfer" not in {s.name for s in receiver.spans if s.parent_span_id
                                 == prefill.span_id}


def test_a_request_without_a_traceparent_gets_no_engine_span(engine_model,  # noqa: F811
                                                             receiver):
    _pd(engine_model, None, TP_DECODE)
    spans = receiver.wait_for(lambda s: len(s) >= 2, timeout_s=5)
    assert sorted(s.name for s in spans) == ["decode", "kv_transfer"]
