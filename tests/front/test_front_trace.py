"""The OpenAI front's span per request (pdtrt.front.app): under the client's W3C traceparent
header, its own traceparent passed to the deployment, exported by the real SDK to a real OTLP
receiver -- on the aiohttp test server with a fake engine (the served chain is
tests/front/test_tracing_served.py)."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import TestClient, TestServer

from pdtrt.front.app import FrontConfig, make_app
from pdtrt.runtime.tracing import Tracing
from pdtrt.tracing_settings import TracingSettings
from tests.front.fakes import FakeEngine, byte_tokenizer, deployment
from tests.otlp_receiver import OtlpReceiver

CHAT = {"model": "org/model", "messages": [{"role": "user", "content": "hi"}]}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TP = f"00-{TRACE}-00f067aa0ba902b7-01"


def _post(rx: OtlpReceiver, engine: FakeEngine, body: dict, headers: dict) -> int:
    tracing = Tracing(TracingSettings(endpoint=rx.endpoint), "front")
    config = FrontConfig(deployment=deployment(), tokenizer=byte_tokenizer(), engine=engine,
                         tracing=tracing)

    async def main():
        async with TestClient(TestServer(make_app(config))) as client:
            r = await client.post("/v1/chat/completions", json=body, headers=headers)
            await r.read()
            return r.status

    status = asyncio.run(main())
    tracing.shutdown()
    return status


def test_a_chat_request_is_a_span_under_the_clients_traceparent():
    engine = FakeEngine(reply="hey")
    with OtlpReceiver() as rx:
        assert _post(rx, engine, {**CHAT, "stream": True}, {"traceparent": TP}) == 200
        (span,) = rx.wait_for(lambda s: len(s) >= 1, timeout_s=5)
    assert (span.service, span.name) == ("pdtrt-front", "POST /v1/chat/completions")
    assert span.trace_id == TRACE and span.parent_span_id == "00f067aa0ba902b7"
    assert span.kind == 2  # SERVER
    assert engine.sent[0]["traceparent"] == f"00-{TRACE}-{span.span_id}-01"
    a = span.attributes
    assert a["http.response.status_code"] == 200 and a["pdtrt.output_tokens"] == 3
    assert a["pdtrt.request_id"] == engine.sent[0]["id"] and a["pdtrt.stream"] is True
    assert a["pdtrt.finish_reason"] == "stop"


def test_a_refused_request_is_an_error_span_and_a_bad_traceparent_a_new_trace():
    engine = FakeEngine()
    with OtlpReceiver() as rx:
        assert _post(rx, engine, {**CHAT, "model": "nope"}, {"traceparent": "junk"}) == 404
        (span,) = rx.wait_for(lambda s: len(s) >= 1, timeout_s=5)
    assert span.parent_span_id == "" and span.status_code == 2
    assert span.attributes["http.response.status_code"] == 404
    assert "does not exist" in span.status_message and engine.sent == []


def test_without_tracing_the_deployment_gets_no_traceparent():
    engine = FakeEngine()
    config = FrontConfig(deployment=deployment(), tokenizer=byte_tokenizer(), engine=engine)

    async def main():
        async with TestClient(TestServer(make_app(config))) as client:
            r = await client.post("/v1/chat/completions", json=CHAT, headers={"traceparent": TP})
            return r.status

    assert asyncio.run(main()) == 200 and engine.sent[0]["traceparent"] is None
