"""LLMClient over the fake transport: timing, inputs, errors, timeouts, cancellation."""

from __future__ import annotations

import time

import pytest
from fake_transport import ENSEMBLE_INPUTS, FakeHub, words_script

from pdtrt.client import GenerateRequest, LLMClient, ModelSignature, StreamEvent, build_inputs
from pdtrt.client.types import Chunk, ErrorKind, GenerateResult
from pdtrt.errors import ModelNotFoundError, RequestError, ServerUnavailableError


def _client(hub: FakeHub, **options) -> LLMClient:
    return LLMClient("fake", transport_factory=hub, clock=hub.clock, **options)


def test_streamed_chunks_are_timed_with_the_injected_clock():
    hub = FakeHub(words_script(delay_s=0.01))
    with _client(hub) as client:
        result = client.generate(GenerateRequest(prompt="hi", max_tokens=4))
    assert result.ok and result.text == " w0 w1 w2 w3" and result.num_chunks == 4
    assert result.ttft_s == pytest.approx(0.01)
    assert result.itls_s == pytest.approx((0.01, 0.01, 0.01))
    assert result.e2e_s == pytest.approx(0.04)


def test_streams_are_reused_between_requests():
    hub = FakeHub()
    with _client(hub) as client:
        for _ in range(3):
            client.generate(GenerateRequest(prompt="hi", max_tokens=2)).raise_for_error()
        assert client.num_open_streams == 1
    assert hub.streams_started == 1
    assert [t.closed_with for t in hub.transports] == [False, False]  # describe + the stream


def test_request_ids_are_unique_or_the_callers():
    hub = FakeHub()
    with _client(hub) as client:
        a = client.generate(GenerateRequest(prompt="a", max_tokens=1))
        b = client.generate(GenerateRequest(prompt="b", max_tokens=1))
        c = client.generate(GenerateRequest(prompt="c", max_tokens=1, request_id="mine"))
    assert a.request_id != b.request_id and c.request_id == "mine"
    assert hub.transports[-1].sent[-1][2] == "mine"


def test_inputs_follow_the_model_signature():
    sig = ModelSignature(name="ensemble", inputs=ENSEMBLE_INPUTS, max_batch_size=0)
    req = GenerateRequest(prompt="hé", max_tokens=8, stream=False, temperature=0.5, top_k=3,
                          top_p=0.9, seed=7)
    tensors = {t.name: t for t in build_inputs(req, sig)}
    assert tensors["text_input"].values == ("hé".encode(),)
    assert tensors["text_input"].datatype == "BYTES" and tensors["text_input"].shape == (1,)
    assert tensors["stream"].values == (False,)
    assert tensors["random_seed"].datatype == "UINT64" and tensors["random_seed"].values == (7,)
    assert {n: t.values[0] for n, t in tensors.items() if n in ("top_k", "top_p",
            "temperature", "max_tokens")} == {"top_k": 3, "top_p": 0.9, "temperature": 0.5,
                                              "max_tokens": 8}
    batched = ModelSignature(name="e", inputs={**ENSEMBLE_INPUTS, "seed": "UINT64"},
                             max_batch_size=64)
    del batched.inputs["random_seed"]
    tensors = {t.name: t for t in build_inputs(req, batched)}
    assert tensors["seed"].values == (7,) and tensors["text_input"].shape == (1, 1)


def test_unset_sampling_inputs_are_not_sent():
    sig = ModelSignature(name="e", inputs={"text_input": "BYTES", "max_tokens": "INT32"})
    names = [t.name for t in build_inputs(GenerateRequest(prompt="x"), sig)]
    assert names == ["text_input", "max_tokens"]


def test_ignore_eos_sends_end_id_minus_one_where_the_model_declares_it():
    sig = ModelSignature(name="ensemble", inputs={**ENSEMBLE_INPUTS, "end_id": "INT32"})
    tensors = {t.name: t for t in build_inputs(GenerateRequest(prompt="x", ignore_eos=True),
                                                 sig)}
    assert tensors["end_id"].values == (-1,) and tensors["end_id"].datatype == "INT32"
    assert "end_id" not in {t.name for t in build_inputs(GenerateRequest(prompt="x"), sig)}


@pytest.mark.parametrize(("inputs", "request_kwargs", "match"), [
    ({"text_input": "BYTES", "max_tokens": "INT32"}, {"top_k": 2}, "has no input 'top_k'"),
    ({"text_input": "BYTES", "max_tokens": "INT32"}, {"stream": False}, "no 'stream' input"),
    ({"prompt": "BYTES"}, {}, "lacks text_input, max_tokens"),
    ({"text_input": "BYTES", "max_tokens": "INT32"}, {"ignore_eos": True},
     "has no input 'end_id'"),
], ids=["sampling-not-declared", "no-stream-input", "not-an-ensemble", "no-end-id"])
def test_requests_the_model_cannot_take(inputs, request_kwargs, match):
    sig = ModelSignature(name="e", inputs=inputs)
    with pytest.raises(RequestError, match=match):
        build_inputs(GenerateRequest(prompt="x", **request_kwargs), sig)


def test_max_tokens_must_be_positive():
    with pytest.raises(RequestError, match="max_tokens must be >= 1"):
        GenerateRequest(prompt="x", max_tokens=0)


def test_request_error_is_in_the_result_and_raises_cleanly():
    hub = FakeHub()
    with _client(hub) as client:
        result = client.generate(GenerateRequest(prompt="", max_tokens=3))
        assert result.error_kind is ErrorKind.REQUEST and "empty" in result.error
        with pytest.raises(RequestError, match="text_input is empty"):
            result.raise_for_error()
        # the stream that carried the error is retired with cancel; a fresh one serves on
        assert client.generate(GenerateRequest(prompt="x", max_tokens=1)).ok
    assert hub.transports[1].closed_with is False  # graceful by default (see cancel_streams)


def test_cancel_streams_cancels_the_grpc_stream_of_a_failed_request():
    hub = FakeHub()
    with LLMClient("fake", transport_factory=hub, clock=hub.clock, cancel_streams=True) as c:
        c.generate(GenerateRequest(prompt="", max_tokens=3))
    assert hub.transports[1].closed_with is True


def test_unknown_model_and_server_down():
    hub = FakeHub()
    with _client(hub) as client:
        with pytest.raises(ModelNotFoundError):
            client.generate(GenerateRequest(prompt="x"), model="nope")
        hub.up = False
        with pytest.raises(ServerUnavailableError):
            client.check("ensemble_other")


def test_timeout_ends_the_request_and_retires_its_stream():
    def hangs(model, tensors, request_id):
        return [(0.01, StreamEvent(text=" a"))]  # never a final response

    hub = FakeHub(hangs)
    with _client(hub, drain_s=0.2) as client:
        pending = client.submit(GenerateRequest(prompt="x"), timeout_s=1.0)
        time.sleep(0.05)
        assert not pending.done
        hub.clock.advance(1.0)
        result = pending.wait(timeout_s=5)
        assert result.error_kind is ErrorKind.TIMEOUT and result.num_chunks == 1
        with pytest.raises(RequestError, match="no final response within 1 s"):
            result.raise_for_error()
        # the drain thread closes the retired stream: wait for that, not for a fixed time
        _wait_closed(hub.transports[1])
    # the server never ended the request (lost): its stream is cancelled, not joined for good
    assert hub.transports[1].closed_with is True


def _wait_closed(transport, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while transport.closed_with is None and time.monotonic() < deadline:
        time.sleep(0.01)


def test_an_abandoned_request_the_server_still_ends_has_its_stream_closed_gracefully():
    def hangs(model, tensors, request_id):
        return [(0.01, StreamEvent(text=" a"))]

    hub = FakeHub(hangs)
    with _client(hub, drain_s=30) as client:
        pending = client.submit(GenerateRequest(prompt="x"), timeout_s=1.0)
        hub.clock.advance(1.0)
        assert pending.wait(timeout_s=5).error_kind is ErrorKind.TIMEOUT
        transport = hub.transports[1]
        time.sleep(0.1)
        assert transport.closed_with is None  # still draining: the request may yet end
        transport.on_event(StreamEvent(final=True))  # the server ends it late
        _wait_closed(transport)
    assert transport.closed_with is False  # no cancel: Triton < 24.12 may crash on one


def test_cancel_and_late_responses_are_ignored():
    def hangs(model, tensors, request_id):
        return []

    hub = FakeHub(hangs)
    done: list[GenerateResult] = []
    with _client(hub) as client:
        pending = client.submit(GenerateRequest(prompt="x"), on_done=done.append)
        pending.cancel()
        transport = hub.transports[1]
        transport.on_event(StreamEvent(text="late"))  # after cancel: dropped
        result = pending.wait(timeout_s=1)
    assert result.error_kind is ErrorKind.CANCELLED and result.chunks == ()
    assert done == [result]


def test_on_chunk_sees_each_chunk_as_it_arrives():
    hub = FakeHub(words_script(delay_s=0.5))
    seen: list[Chunk] = []
    with _client(hub) as client:
        client.generate(GenerateRequest(prompt="x", max_tokens=3), on_chunk=seen.append)
    assert [c.text for c in seen] == [" w0", " w1", " w2"]
    assert [c.time_s for c in seen] == [100.5, 101.0, 101.5]


@pytest.mark.parametrize(("text", "expected"), [
    ("Stream removed (Socket closed)", True),
    ("failed to connect to all addresses", True),
    ("[StatusCode.UNAVAILABLE] Socket closed", True),
    ("fake_llm: text_input is empty", False),
], ids=["stream-removed", "connect", "unavailable", "request-error"])
def test_connection_errors_are_told_apart_from_request_errors(text, expected):
    from pdtrt.client.transport import _is_connection_error

    assert _is_connection_error(text) is expected


@pytest.mark.parametrize(("times", "sizes", "gaps"), [
    ((0.0, 1.0, 2.0), (), (1.0, 1.0)),  # the model does not say: one token each
    ((0.0, 1.0, 2.0), (1, 1, 1), (1.0, 1.0)),
    ((0.0, 0.3, 0.7), (1, 3, 4), (0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1)),  # stream_interval 4
    ((0.0, 1.0, 1.5), (1, 0, 1), (1.5,)),  # a response with text and no token has no gap
    ((0.0,), (5,), ()),  # one response (not streamed): no gap
], ids=["unknown", "one-each", "interval-4", "empty-response", "single"])
def test_token_gaps_spread_a_responses_gap_over_its_tokens(times, sizes, gaps):
    from pdtrt.client.types import token_gaps_s

    assert token_gaps_s(times, sizes) == pytest.approx(gaps)


def test_the_token_count_is_asked_where_the_model_declares_it():
    sig = ModelSignature(name="e", inputs={**ENSEMBLE_INPUTS,
                                           "return_num_output_tokens": "BOOL"},
                         outputs=("text_output", "num_output_tokens"))
    tensors = {t.name: t for t in build_inputs(GenerateRequest(prompt="x"), sig)}
    assert tensors["return_num_output_tokens"].values == (True,)
    assert tensors["return_num_output_tokens"].datatype == "BOOL"
    plain = ModelSignature(name="e", inputs=ENSEMBLE_INPUTS)
    assert "return_num_output_tokens" not in {t.name for t in build_inputs(
        GenerateRequest(prompt="x"), plain)}


def test_responses_of_several_tokens_count_each_token_and_spread_the_itl():
    """stream_interval 4 and 9 tokens: responses of 1, 3, 4 and 1 tokens."""
    def every_fourth(model, tensors, request_id):
        return [(0.05, StreamEvent(text=" a", num_tokens=1)),
                (0.03, StreamEvent(text=" b c d", num_tokens=3)),
                (0.04, StreamEvent(text=" e f g h", num_tokens=4)),
                (0.01, StreamEvent(text=" i", num_tokens=1, final=True))]

    hub = FakeHub(every_fourth)
    with _client(hub) as client:
        result = client.generate(GenerateRequest(prompt="x", max_tokens=9))
    assert result.ok and result.num_chunks == 4 and result.num_tokens == 9
    assert result.ttft_s == pytest.approx(0.05)
    assert result.itls_s == pytest.approx((0.01,) * 8)
    assert result.to_dict()["num_tokens"] == 9
