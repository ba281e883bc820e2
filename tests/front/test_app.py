"""The front's HTTP surface on a fake engine (pdtrt.front.app): OpenAI shapes, SSE, errors,
keys, and a client that leaves stopping its request. The real deployment: test_openai_e2e."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from pdtrt.front.app import FrontConfig, make_app
from tests.front.fakes import TIMING, FakeEngine, byte_tokenizer, deployment

CHAT = {"model": "org/model", "messages": [{"role": "user", "content": "hi"}]}


def _serve(engine: FakeEngine, check, *, api_key=None, stall_s=60.0):
    config = FrontConfig(deployment=deployment(), tokenizer=byte_tokenizer(), engine=engine,
                         api_key=api_key, stall_s=stall_s)

    async def main():
        server = TestServer(make_app(config), handler_cancellation=True)
        async with TestClient(server) as client:
            return await check(client)

    return asyncio.run(main())


async def _events(response) -> list:
    raw = (await response.read()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    return [json.loads(line[6:]) for line in raw.split("\n\n")
            if line.startswith("data: ") and line != "data: [DONE]"]


def test_a_chat_completion_in_openais_shape():
    async def check(client):
        r = await client.post("/v1/chat/completions", json={**CHAT, "logprobs": True})
        return r.status, await r.json()

    engine = FakeEngine(reply="héllo")
    status, body = _serve(engine, check)
    assert status == 200 and body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-") and body["model"] == "org/model"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "héllo"}
    assert choice["finish_reason"] == "stop"  # ended before max_tokens: the end id
    assert [e["logprob"] for e in choice["logprobs"]["content"]] == [-0.5] * 6  # per token
    prompt = byte_tokenizer().chat([{"role": "user", "content": "hi"}])
    assert body["usage"] == {"prompt_tokens": len(prompt), "completion_tokens": 6,
                             "total_tokens": len(prompt) + 6}
    assert engine.sent[0]["inputs"]["input_ids"].tolist() == [prompt]


def test_a_streamed_chat_completion_with_usage():
    async def check(client):
        r = await client.post("/v1/chat/completions", json={
            **CHAT, "stream": True, "max_tokens": 4, "stream_options": {"include_usage": True}})
        assert r.headers["Content-Type"] == "text/event-stream"
        return await _events(r)

    events = _serve(FakeEngine(reply="hello"), check)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert text == "hell"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    assert all("usage" in e for e in events)  # null on every chunk but the last


def test_completions_streamed_and_not():
    async def check(client):
        whole = await (await client.post("/v1/completions", json={
            "model": "dep", "prompt": "x", "max_tokens": 3, "logprobs": 0})).json()
        events = await _events(await client.post("/v1/completions", json={
            "model": "dep", "prompt": ["x"], "stream": True}))
        return whole, events

    whole, events = _serve(FakeEngine(reply="abcdef"), check)
    assert whole["object"] == "text_completion" and whole["choices"][0]["text"] == "abc"
    assert whole["choices"][0]["logprobs"]["token_logprobs"] == [-0.5] * 3
    assert whole["choices"][0]["finish_reason"] == "length"
    assert "".join(e["choices"][0]["text"] for e in events) == "abcdef"


def test_chat_top_logprobs_in_openais_shape_streamed_and_not():
    """``top_logprobs`` N: each content entry's ``top_logprobs`` holds the N best as
    {token, logprob, bytes}, in both the whole answer and the stream's chunks."""
    async def check(client):
        body = {**CHAT, "logprobs": True, "top_logprobs": 3, "max_tokens": 4}
        whole = await (await client.post("/v1/chat/completions", json=body)).json()
        events = await _events(await client.post("/v1/chat/completions",
                                                 json={**body, "stream": True}))
        return whole, events

    engine = FakeEngine(reply="héllo")
    whole, events = _serve(engine, check)
    from pdtrt.engine_io import TOP_LOG_PROBS_INPUT

    assert engine.sent[0]["inputs"][TOP_LOG_PROBS_INPUT].item() == 3
    content = whole["choices"][0]["logprobs"]["content"]
    streamed = [e for ev in events if (lp := ev["choices"][0]["logprobs"]) for e in lp["content"]]
    assert len(content) == 4 and streamed == content
    text = "héllo".encode()
    for i, entry in enumerate(content):
        assert entry["bytes"] == list(entry["token"].encode())
        assert [a["logprob"] for a in entry["top_logprobs"]] == [-0.5, -1.5, -2.5]
        assert entry["top_logprobs"][0] == {"token": entry["token"], "logprob": -0.5,
                                            "bytes": entry["bytes"]}
        assert [a["bytes"] for a in entry["top_logprobs"]] == [
            list(bytes([text[i] + j]).decode("utf-8", "replace").encode()) for j in range(3)]


def test_completions_top_logprobs_are_dicts_that_always_hold_the_chosen_token():
    """Completions ``logprobs`` N: ``top_logprobs`` is one {text: logprob} per token, the N
    best -- and the chosen token where it is not among them (up to N + 1 keys, as OpenAI's
    legacy API documents); ``logprobs`` 0: null."""
    async def check(client):
        body = {"model": "dep", "prompt": "x", "max_tokens": 3, "logprobs": 2}
        whole = await (await client.post("/v1/completions", json=body)).json()
        events = await _events(await client.post("/v1/completions",
                                                 json={**body, "stream": True}))
        zero = await (await client.post("/v1/completions", json={**body, "logprobs": 0}))\
            .json()
        return whole, events, zero

    whole, events, zero = _serve(FakeEngine(reply="abc"), check)
    lps = whole["choices"][0]["logprobs"]
    assert lps["tokens"] == ["a", "b", "c"] and lps["token_logprobs"] == [-0.5] * 3
    assert lps["top_logprobs"] == [{"a": -0.5, "b": -1.5}, {"b": -0.5, "c": -1.5},
                                   {"c": -0.5, "d": -1.5}]
    assert [t for e in events if (lp := e["choices"][0]["logprobs"])
            for t in lp["top_logprobs"]] == lps["top_logprobs"]
    assert zero["choices"][0]["logprobs"]["top_logprobs"] is None

    outside, _, _ = _serve(FakeEngine(reply="abc", chosen_in_top=False), check)
    tops = outside["choices"][0]["logprobs"]["top_logprobs"]
    assert tops[0] == {"b": pytest.approx(-0.3), "c": pytest.approx(-0.4), "a": -0.5}


def test_a_stop_string_cuts_the_text_and_stops_the_request_on_the_server():
    async def check(client):
        whole = await (await client.post("/v1/chat/completions", json={
            **CHAT, "stop": ["wor"]})).json()
        events = await _events(await client.post("/v1/chat/completions", json={
            **CHAT, "stop": "o w", "stream": True}))
        return whole, events

    engine = FakeEngine(reply="hello world")
    whole, events = _serve(engine, check)
    assert whole["choices"][0]["message"]["content"] == "hello "
    assert whole["choices"][0]["finish_reason"] == "stop"
    streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
    assert streamed == "hell" and events[-1]["choices"][0]["finish_reason"] == "stop"
    assert len(engine.stopped) == 2 and engine.finished == []


async def _until_stopped(engine: FakeEngine) -> None:
    """Wait (2 s at most) until the front has stopped a request at the engine."""
    for _ in range(100):
        if engine.stopped:
            return
        await asyncio.sleep(0.02)


async def _hang_up_a_stream(client) -> None:
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    await r.content.readuntil(b"\n\n")
    r.close()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_a_client_that_hangs_up_stops_its_request(stream):
    engine = FakeEngine(reply="x" * 50, step_s=0.05)

    async def check(client):
        r = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        if stream:
            await r.content.readuntil(b"\n\n")
        r.close()
        await _until_stopped(engine)

    async def check_whole(client):
        task = asyncio.ensure_future(client.post("/v1/chat/completions", json=CHAT))
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _until_stopped(engine)

    _serve(engine, check if stream else check_whole)
    assert len(engine.stopped) == 1 and engine.finished == []


def test_an_error_before_and_after_the_stream_began():
    async def check(client):
        r = await client.post("/v1/chat/completions", json=CHAT)
        events = await _events(await client.post("/v1/chat/completions",
                                                 json={**CHAT, "stream": True}))
        return r.status, await r.json(), events

    status, body, events = _serve(FakeEngine(error="decode failed: boom", fail_after=2), check)
    assert status == 500 and body["error"]["type"] == "server_error"
    assert body["error"]["message"] == "decode failed: boom"
    assert events[-1] == {"error": {"message": "decode failed: boom", "type": "server_error",
                                    "param": None, "code": None}}


def test_a_silent_deployment_is_a_504_and_the_request_is_stopped():
    engine = FakeEngine(reply="abc", step_s=5.0)

    async def check(client):
        r = await client.post("/v1/chat/completions", json=CHAT)
        return r.status, await r.json()

    status, body = _serve(engine, check, stall_s=0.2)
    assert status == 504 and "sent nothing for 0.2 s" in body["error"]["message"]
    assert engine.stopped


def test_api_key_models_and_unknown_paths():
    async def check(client):
        out = {}
        out["no_key"] = await client.get("/v1/models")
        out["bad_key"] = await client.get("/v1/models", headers={"Authorization": "Bearer no"})
        auth = {"Authorization": "Bearer s3cret"}
        out["models"] = await client.get("/v1/models", headers=auth)
        out["health"] = await client.get("/health")
        out["model"] = await client.get("/v1/models/org/model", headers=auth)
        out["missing_model"] = await client.post("/v1/chat/completions", headers=auth,
                                                 json={**CHAT, "model": "gpt-4"})
        out["path"] = await client.get("/v1/nothing", headers=auth)
        return {k: (r.status, await r.json()) for k, r in out.items()}

    got = _serve(FakeEngine(), check, api_key="s3cret")
    assert got["no_key"][0] == 401 and got["no_key"][1]["error"]["code"] == "invalid_api_key"
    assert got["bad_key"][0] == 401
    assert got["models"] == (200, {"object": "list", "data": [got["model"][1]]})
    assert got["model"][1]["id"] == "org/model" and got["health"][0] == 200
    assert got["missing_model"][0] == 404
    assert got["missing_model"][1]["error"]["code"] == "model_not_found"
    assert got["path"][0] == 404 and "error" in got["path"][1]


def _sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_fronts_histograms_count_every_token_and_request():
    engine = FakeEngine(reply="abcde")

    async def check(client):
        await _events(await client.post("/v1/chat/completions", json={**CHAT, "stream": True}))
        await client.post("/v1/completions", json={"model": "dep", "prompt": "x", "n": 3})
        engine.error, engine.fail_after = "boom", 1  # the next request fails mid-stream
        await _events(await client.post("/v1/chat/completions", json={**CHAT, "stream": True}))
        return (await (await client.get("/metrics")).read()).decode()

    text = _serve(engine, check)
    assert _sample(text, "pdtrt_front_ttft_seconds_count") == 2  # both streams got a token
    assert _sample(text, "pdtrt_front_itl_seconds_count") == 4  # 5 tokens: 4 gaps
    assert _sample(text, "pdtrt_front_e2e_seconds_count") == 1  # only the one that ended well
    assert _sample(text, "pdtrt_front_output_tokens_sum") == 5
    chat = "/v1/chat/completions"
    assert _sample(text, "pdtrt_front_requests_total", endpoint=chat, status="200") == 1
    assert _sample(text, "pdtrt_front_requests_total", endpoint=chat, status="500") == 1
    assert _sample(text, "pdtrt_front_requests_total", endpoint="/v1/completions",
                   status="400") == 1
    assert _sample(text, "pdtrt_front_requests_in_flight") == 0


def test_a_hang_up_is_counted():
    engine = FakeEngine(reply="x" * 50, step_s=0.05)

    async def check(client):
        await _hang_up_a_stream(client)
        await _until_stopped(engine)
        await asyncio.sleep(0.05)
        return (await (await client.get("/metrics")).read()).decode()

    text = _serve(engine, check)
    assert _sample(text, "pdtrt_front_disconnects_total") == 1
    assert _sample(text, "pdtrt_front_requests_in_flight") == 0


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_the_timing_header_returns_the_routers_timing(stream):
    """x-pdtrt-timing: the router is asked (its input), and its timing comes back in the last
    chunk or the whole body; without the header neither."""
    async def check(client):
        got = []
        for headers in ({"x-pdtrt-timing": "true"}, {}):
            r = await client.post("/v1/chat/completions", headers=headers,
                                  json={**CHAT, "stream": stream, "max_tokens": 3})
            got.append(await _events(r) if stream else [await r.json()])
        return got

    engine = FakeEngine(reply="hello")
    asked, plain = _serve(engine, check)
    assert "return_timing" in engine.sent[0]["inputs"]
    assert "return_timing" not in engine.sent[1]["inputs"]
    last = asked[-1]  # the chunk with the finish_reason (no usage asked), or the body
    assert last["choices"][0]["finish_reason"] == "length" and last["pdtrt_timing"] == TIMING
    assert sum(len(e["choices"][0].get("delta", {}).get("content", "")) for e in asked
               if stream) == (3 if stream else 0)
    assert not any("pdtrt_timing" in e for e in [*plain, *asked[:-1]])


def test_the_itl_histogram_spreads_a_responses_gap_over_its_tokens():
    """stream_interval 4: responses of 1, 3 and 4 tokens 0.3 s and 0.4 s apart give 7 ITL
    samples of 0.1 s, not 2 of 0.3 and 0.4."""
    from pdtrt.front.metrics import FrontMetrics, RequestTimer

    clock = iter([0.0, 0.2, 0.5, 0.9])
    metrics = FrontMetrics()
    timer = RequestTimer(metrics, lambda: next(clock))
    for count in (1, 3, 4):
        timer.tokens(count)
    registry = metrics.registry
    assert registry.get_sample_value("pdtrt_front_itl_seconds_count") == 7
    assert registry.get_sample_value("pdtrt_front_itl_seconds_sum") == pytest.approx(0.7)
    assert registry.get_sample_value("pdtrt_front_ttft_seconds_sum") == pytest.approx(0.2)
