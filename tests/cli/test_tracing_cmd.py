"""``pdtrt serve --otlp-traces-endpoint``: one chat request with a W3C traceparent through the
OpenAI front of a real served reference deployment is one trace at a real OTLP/HTTP receiver --
spans from the front, the router, the prefill and the decode, the KV transfer with its bytes --
and so is a tritonclient request to the ``ensemble`` with the ``traceparent`` request parameter
(the router's spans and below); ``pdtrt front`` refuses an endpoint that is no URL."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES

from pdtrt.serve.triton_server import free_port
from tests.otlp_receiver import OtlpReceiver

TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER = "b7ad6b7169203331"
TP = f"00-{TRACE}-{CALLER}-01"
TRITON_TRACE, TRITON_CALLER = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
WANTED = {("pdtrt-front", "POST /v1/chat/completions"), ("pdtrt-router", "router"),
          ("pdtrt-router", "queue"), ("pdtrt-router", "prefill call"),
          ("pdtrt-router", "decode call"), ("pdtrt-router", "kv_transfer"),
          ("pdtrt-prefill", "prefill"), ("pdtrt-decode", "decode"),
          ("pdtrt-decode", "kv_transfer")}


def _names(spans):
    return {(s.service, s.name) for s in spans}


@pytest.mark.triton
@pytest.mark.slow
def test_a_chat_request_is_one_trace_from_the_front_to_the_kv_transfer(
        run, tmp_path, reference_engines, monkeypatch):
    openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
    root, _dep = reference_engines
    # the exporters send only when flushed: the spans below reach the receiver because the
    # stubs' finalize and the front's stop flush them (none is lost when a process ends)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    wd, port = tmp_path / "wd", free_port()
    with OtlpReceiver() as rx:
        result = run("serve", str(EXAMPLES / "reference-cpu.yaml"), "--workdir", str(wd),
                     "--engines-dir", str(root), "--detach", "--openai-port", str(port),
                     "--otlp-traces-endpoint", rx.endpoint, "--json")
        try:
            assert result.exit_code == 0, result.output
            client = openai.OpenAI(base_url=json.loads(result.stdout)["endpoints"]["openai"],
                                   api_key="none", max_retries=0, timeout=120)
            reply = client.chat.completions.create(
                model="pdtrt/tiny-llama", messages=[{"role": "user", "content": "Hi there"}],
                max_tokens=6, temperature=0, extra_headers={"traceparent": TP},
                extra_body={"ignore_eos": True})
            assert reply.usage.completion_tokens == 6
            # a tritonclient caller: the request parameter, through the ensemble to the router
            from tests.e2e_client import ensemble_inputs, generate

            got = generate(json.loads(result.stdout)["endpoints"]["grpc"], "ensemble",
                           ensemble_inputs("Hi there", 6), request_id="traced",
                           parameters={"traceparent": f"00-{TRITON_TRACE}-{TRITON_CALLER}-01"})
            assert got.error is None and got.final_seen
            assert rx.spans == []  # nothing flushed yet (the schedule delay above)
        finally:
            stopped = run("stop", str(wd))
        assert stopped.exit_code == 0, stopped.output
        spans = rx.wait_for(lambda s: WANTED <= _names(s) and any(
            x.trace_id == TRITON_TRACE and x.name == "kv_transfer" for x in s), timeout_s=30)
    ours = [s for s in spans if s.trace_id == TRACE]
    assert _names(ours) == WANTED and len(ours) == len(WANTED), _names(spans)
    by = {(s.service, s.name): s for s in ours}
    front, router = by["pdtrt-front", "POST /v1/chat/completions"], by["pdtrt-router", "router"]
    pcall, dcall = by["pdtrt-router", "prefill call"], by["pdtrt-router", "decode call"]
    prefill, decode = by["pdtrt-prefill", "prefill"], by["pdtrt-decode", "decode"]
    kv = by["pdtrt-decode", "kv_transfer"]
    # the parent links: client -> front -> router -> its calls -> the engines -> the KV pull
    assert front.parent_span_id == CALLER and router.parent_span_id == front.span_id
    assert pcall.parent_span_id == dcall.parent_span_id == router.span_id
    assert by["pdtrt-router", "queue"].parent_span_id == router.span_id
    assert by["pdtrt-router", "kv_transfer"].parent_span_id == dcall.span_id
    assert prefill.parent_span_id == pcall.span_id and decode.parent_span_id == dcall.span_id
    assert kv.parent_span_id == decode.span_id
    assert kv.attributes["pdtrt.kv_transfer.bytes"] > 0
    assert decode.start_ns <= kv.start_ns <= kv.end_ns <= decode.end_ns
    assert router.attributes["pdtrt.output_tokens"] == 6
    assert front.attributes["pdtrt.output_tokens"] == 6
    assert front.start_ns <= router.start_ns and router.end_ns <= front.end_ns
    assert all(s.status_code != 2 for s in ours)
    # the tritonclient request: the same tree from the router down, under its caller's span
    theirs = {(s.service, s.name): s for s in spans if s.trace_id == TRITON_TRACE}
    assert set(theirs) == WANTED - {("pdtrt-front", "POST /v1/chat/completions")}
    assert theirs["pdtrt-router", "router"].parent_span_id == TRITON_CALLER
    assert theirs["pdtrt-router", "router"].attributes["pdtrt.request_id"] == "traced"
    assert theirs["pdtrt-decode", "kv_transfer"].attributes["pdtrt.kv_transfer.bytes"] > 0


def test_an_endpoint_that_is_no_url_is_refused(run, tmp_path):
    result = run("front", str(tmp_path), "--grpc-url", "127.0.0.1:1",
                 "--otlp-traces-endpoint", "collector:4318")
    assert result.exit_code == 2
    assert "is not an http(s):// URL" in result.stderr
