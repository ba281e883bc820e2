"""The router model against a fake Triton seam: scripted phase answers, no server.

Each test routes requests through ``TritonPythonModel.execute`` with :class:`FakeTriton`
standing in for Triton (BLS calls to the phases answered by a script, responses recorded) and
checks what the client got and which phase requests the router made.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from pdtrt.engine_io import (
    ERROR_OUTPUT,
    TOP_LOG_PROB_IDS_OUTPUT,
    TOP_LOG_PROBS_INPUT,
    TOP_LOG_PROBS_OUTPUT,
    Param,
    RequestType,
    top_log_prob_outputs,
    top_log_probs_of,
)
from pdtrt.runtime.router import reply as reply_module
from pdtrt.runtime.router.model import TritonPythonModel
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import (
    Fail,
    FakeRequest,
    FakeTriton,
    model_args,
    tokens_out,
    wait_until,
)

OUTPUT = [7, 8, 9, 10]  # what the engines generate for every prompt
PARAMS = np.frombuffer(b'{"opaque": "context_phase_params"}', dtype=np.uint8).reshape(1, -1)
ROUTER_PARAMS = {Param.PREFILL_MODEL: "prefill", Param.DECODE_MODEL: "decode",
                 Param.AGGREGATED_MODEL: "", Param.AGGREGATED_BELOW_TOKENS: "0",
                 Param.EARLY_FIRST_TOKEN: "true", Param.ERROR_OUTPUT: ERROR_OUTPUT,
                 Param.PREFILL_URL: "", Param.DECODE_URL: "", Param.PROBE_INTERVAL_S: "0"}


def engines(*, chunk=1, prefill=None, decode=None):
    """Phase models answering like pdtrt's engine models: the prefill the first token and the
    KV hand-off; the decode (and the aggregated model) the whole output, first token again, in
    responses of ``chunk`` tokens; a stop request an empty answer. ``prefill`` / ``decode``
    replace an answer (a function of the call)."""
    def phases(call):
        if call.is_stop:
            return []
        if call.model == "prefill":
            return prefill(call) if prefill else [tokens_out(OUTPUT[0],
                                                             context_phase_params=PARAMS)]
        if call.model == "decode" and decode is not None:
            return decode(call)
        return [tokens_out(*OUTPUT[i:i + chunk]) for i in range(0, len(OUTPUT), chunk)]
    return phases


def request(prompt_len=5, max_new=4, *, streaming=True, exclude_input=True, request_id="r1"):
    """A router request as Triton hands it over (scalars reshaped to ``[batch]``)."""
    return FakeRequest(request_id, {
        "input_ids": np.array([list(range(20, 20 + prompt_len))], dtype=np.int32),
        "input_lengths": np.array([prompt_len], dtype=np.int32),
        "request_output_len": np.array([max_new], dtype=np.int32),
        "streaming": np.array([streaming]), "exclude_input_in_output": np.array([exclude_input])})


def new_router(phases, clock=time.monotonic, **params):
    """An initialised router model on a fake seam, reading ``clock``: (model, FakeTriton)."""
    triton = FakeTriton(phases)
    model = TritonPythonModel(triton, clock=clock)
    model.initialize(model_args("router", {**ROUTER_PARAMS, **params}))
    return model, triton


def route(model, *requests):
    asyncio.run(model.execute(list(requests)))


def ended_once(req, error=None):
    """Exactly one final response, nothing after it; an error response iff ``error``."""
    assert req.num_finals == 1 and not req.late, req.responses + req.late
    assert req.responses[-1].final
    if error is None:
        assert req.errors == []
    else:
        assert len(req.errors) == 1 and error in req.errors[0] and req.responses[-1].error
    return True


# -- no token twice, none missing --------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 2, 4], ids=["decode-1-per-response", "2", "4"])
@pytest.mark.parametrize("early", ["true", "false"], ids=["early-first-token", "first-from-decode"])
def test_a_streaming_client_gets_each_token_once(router, early, chunk):
    model, triton = router(engines(chunk=chunk), early_first_token=early)
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    [decode] = triton.calls_to("decode")
    assert np.array_equal(decode.inputs["context_phase_params"], PARAMS)


@pytest.mark.parametrize(("early", "before_decode"), [("true", [[7]]), ("false", [])],
                         ids=["early-first-token", "first-from-decode"])
def test_the_first_token_goes_out_before_the_decode_is_asked(router, early, before_decode):
    req = request()
    seen = []

    def decode(call):
        seen.append([r.tokens for r in req.responses])
        return [tokens_out(t) for t in OUTPUT]

    model, _ = router(engines(decode=decode), early_first_token=early)
    route(model, req)
    assert seen == [before_decode] and req.tokens == OUTPUT


@pytest.mark.parametrize(("exclude_input", "expected"),
                         [(True, OUTPUT), (False, [20, 21, 22, 23, 24, *OUTPUT])],
                         ids=["output-only", "prompt-and-output"])
def test_a_non_streaming_client_gets_one_response_with_the_whole_output(router, exclude_input,
                                                                         expected):
    model, _ = router(engines(chunk=1))
    req = request(streaming=False, exclude_input=exclude_input)
    route(model, req)
    assert len(req.responses) == 1 and req.tokens == expected and ended_once(req)


LOGPROBS = [-0.5, -1.0, -0.25, -2.0]  # what the engines report for OUTPUT


def _with_logprobs(tokens, **extra):
    lps = [LOGPROBS[OUTPUT.index(t)] for t in tokens]
    return tokens_out(*tokens, output_log_probs=np.array(lps, np.float32).reshape(1, 1, -1),
                      **extra)


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "one-response"])
def test_log_probs_are_asked_of_both_phases_and_relayed_once_per_token(router, streaming):
    def decode(call):  # the whole output again, first token included
        return [_with_logprobs(OUTPUT[:2]), _with_logprobs(OUTPUT[2:])]

    model, triton = router(engines(
        prefill=lambda call: [_with_logprobs(OUTPUT[:1], context_phase_params=PARAMS)],
        decode=decode))
    req = request(streaming=streaming)
    req.inputs["return_log_probs"] = np.array([True])
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    assert all("output_log_probs" in c.outputs for c in triton.calls_to("prefill")
               + triton.calls_to("decode"))
    sent = [r.outputs for r in req.responses if "output_ids" in r.outputs]
    relayed = [v for o in sent for v in o["output_log_probs"].reshape(-1).tolist()]
    assert relayed == LOGPROBS
    assert float(sent[-1]["cum_log_probs"].reshape(-1)[0]) == pytest.approx(sum(LOGPROBS))
    # a prefill that reports no log-probs: the decode's, by position, for every token
    model2, _ = router(engines(prefill=lambda call: [tokens_out(OUTPUT[0],
                                                                context_phase_params=PARAMS)],
                               decode=decode))
    late = request(streaming=streaming, request_id="late")
    late.inputs["return_log_probs"] = np.array([True])
    route(model2, late)
    sent = [r.outputs for r in late.responses if "output_log_probs" in r.outputs]
    assert [v for o in sent for v in o["output_log_probs"].reshape(-1).tolist()] == \
        LOGPROBS[len(LOGPROBS) - sum(o["output_ids"].size for o in sent):]
    plain = request(request_id="plain")
    route(model, plain)
    assert all("output_log_probs" not in r.outputs for r in plain.responses)
    assert "output_log_probs" not in triton.calls_to("decode")[-1].outputs


def _alternatives(token: int) -> tuple[tuple[int, float], ...]:
    """What the fake engines report as a token's two best alternatives."""
    return ((token, -0.5), (token + 50, -2.5))  # exact in FP32


def _with_top(tokens, rows=None, **extra):
    rows = [_alternatives(t) for t in tokens] if rows is None else rows
    return _with_logprobs(tokens, **top_log_prob_outputs(rows, 2), **extra)


def _relayed_top(req) -> list:
    return [row for r in req.responses if TOP_LOG_PROBS_OUTPUT in r.outputs
            for row in top_log_probs_of(r.outputs)]


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "one-response"])
def test_the_alternatives_are_asked_of_both_phases_and_relayed_once_per_position(router,
                                                                                streaming):
    """``num_top_log_probs``: the router asks each phase for the alternatives and relays them
    by position -- the first token's from the prefill, even when the decode repeats that token
    with others -- and never to a request that did not ask."""
    def decode(call):  # the whole output again; its first token's alternatives differ
        return [_with_top(OUTPUT[:2], rows=[((1, -9.0), (2, -9.5)), _alternatives(OUTPUT[1])]),
                _with_top(OUTPUT[2:])]

    model, triton = router(engines(
        prefill=lambda call: [_with_top(OUTPUT[:1], context_phase_params=PARAMS)],
        decode=decode))
    req = request(streaming=streaming)
    req.inputs["return_log_probs"] = np.array([True])
    req.inputs[TOP_LOG_PROBS_INPUT] = np.array([2], np.int32)
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    for call in triton.calls_to("prefill") + triton.calls_to("decode"):
        assert {TOP_LOG_PROBS_OUTPUT, TOP_LOG_PROB_IDS_OUTPUT} <= set(call.outputs)
        assert int(call.inputs[TOP_LOG_PROBS_INPUT].reshape(-1)[0]) == 2
    assert _relayed_top(req) == [_alternatives(t) for t in OUTPUT]
    plain = request(request_id="plain")
    plain.inputs["return_log_probs"] = np.array([True])
    route(model, plain)
    assert _relayed_top(plain) == []
    assert TOP_LOG_PROBS_OUTPUT not in triton.calls_to("decode")[-1].outputs


def test_both_phases_see_the_client_id_with_one_unique_suffix(router):
    model, triton = router(engines())
    route(model, request(request_id="client-7"), request(request_id="client-7"))
    ids = [c.request_id for c in triton.calls]
    assert len(ids) == 4 and all(i.startswith("client-7~") for i in ids)
    assert len(set(ids)) == 2  # prefill + decode of each request share one id
    assert {c.request_type for c in triton.calls} == {RequestType.CONTEXT_ONLY,
                                                      RequestType.GENERATION_ONLY}


# -- cancellation ------------------------------------------------------------------------------
def test_a_client_cancel_during_decode_stops_the_decode(router, monkeypatch):
    monkeypatch.setattr(reply_module, "CANCEL_CHECK_S", 0.0)  # asked at every response
    req = request(max_new=50)

    def decode(call):
        yield tokens_out(7)  # the first token again
        yield tokens_out(8)
        wait_until(lambda: 8 in req.tokens)  # the client saw 8, then cancels
        req.cancel()
        for t in range(9, 20):  # an engine that has not seen the stop yet
            yield tokens_out(t)

    model, triton = router(engines(decode=decode))
    route(model, req)
    [decode_call] = triton.calls_to("decode")
    [stop] = triton.calls_to("decode", stop=True)
    assert stop.request_id == decode_call.request_id
    assert np.array_equal(stop.inputs["input_ids"], decode_call.inputs["input_ids"])
    assert req.tokens == [7, 8] and ended_once(req)  # nothing relayed after the cancel
    assert triton.metrics["pdtrt_router_cancelled_total"] == 1
    assert triton.calls_to("prefill", stop=True) == []  # the decode pulled the KV


def test_cancellation_is_asked_at_most_once_per_check_interval_while_tokens_stream(
        router, monkeypatch):
    """Each ask is a round trip to the server: not one per relayed token. A cancel is still
    seen, at the first token after the interval."""
    monkeypatch.setattr(reply_module, "CANCEL_CHECK_S", 0.2)
    clock = FakeClock()
    req = request(max_new=200)
    asked = []

    def decode(call):
        yield from (tokens_out(t) for t in range(7, 107))  # 100 tokens within the interval
        wait_until(lambda: len(req.tokens) == 100)
        req.cancel()
        clock.advance(0.25)  # more than the interval
        yield from (tokens_out(t) for t in range(107, 150))

    model, triton = router(engines(decode=decode), clock=clock)
    is_cancelled = triton.is_cancelled
    triton.is_cancelled = lambda incoming: asked.append(1) or is_cancelled(incoming)
    route(model, req)
    assert len(asked) == 2  # after the prefill, and at the first token after the interval
    assert req.tokens == list(range(7, 107)) and ended_once(req)
    assert len(triton.calls_to("decode", stop=True)) == 1


def test_a_client_cancel_between_the_phases_sends_no_decode(router):
    req = request()

    def prefill(call):
        req.cancel()
        return [tokens_out(7, context_phase_params=PARAMS)]

    model, triton = router(engines(prefill=prefill))
    route(model, req)
    assert triton.calls_to("decode") == []
    assert triton.calls_to("prefill", stop=True) == []  # useless on 1.2: the prefill finished
    # the first token went out before the router asked (early first token)
    assert req.tokens == [7] and ended_once(req)
    assert triton.metrics["pdtrt_router_cancelled_total"] == 1


def test_a_client_cancel_while_the_prefill_is_queued_stops_the_prefill(router):
    """A prefill queued behind a full KV pool (TensorRT-LLM 1.2 keeps a finished prefill's KV
    until it is pulled or expires) sends nothing for seconds: the router does not wait for its
    first response to notice the client has gone, it stops the prefill (within
    PREFILL_CANCEL_WATCH_S) and the request ends."""
    import threading

    req = request()
    stopped = threading.Event()

    def phases(call):
        if call.is_stop:
            stopped.set()
            return []
        if call.model == "prefill":
            return queued()
        return [tokens_out(*OUTPUT)]

    def queued():
        req.cancel()
        assert stopped.wait(5), "the router never stopped the queued prefill"
        return
        yield  # a cancelled engine request: its final response, no tokens

    model, triton = router(phases)
    start = time.monotonic()
    route(model, req)
    assert time.monotonic() - start < 2.0
    [prefill_call] = triton.calls_to("prefill")
    [stop] = triton.calls_to("prefill", stop=True)
    assert stop.request_id == prefill_call.request_id
    assert triton.calls_to("decode") == [] and req.tokens == [] and ended_once(req)
    assert triton.metrics["pdtrt_router_cancelled_total"] == 1


def stop_request(request_id):
    """TensorRT-LLM's stop request to the router: ``stop`` = true, the id of what to stop."""
    one = np.array([[1]], dtype=np.int32)
    return FakeRequest(request_id, {"input_ids": one, "input_lengths": np.array([1], np.int32),
                                    "request_output_len": np.array([1], np.int32),
                                    "stop": np.array([True])})


def test_a_stop_request_stops_the_request_with_its_id(router):
    """TensorRT-LLM's stop contract on the router too (a client that cannot cancel its stream,
    e.g. over HTTP, stops it this way): the request stops as if cancelled, the stop gets an
    empty final response."""
    model, triton = router(engines())
    req, halt = request(max_new=8, request_id="chat-1"), stop_request("chat-1")
    route(model, req, halt)  # the stop arrives while the prefill runs
    assert triton.calls_to("decode") == []
    assert req.tokens == [7] and ended_once(req)
    assert ended_once(halt) and all(not r.outputs for r in halt.responses)
    assert triton.metrics["pdtrt_router_cancelled_total"] == 1


def test_a_health_probe_is_answered_by_the_event_loop_and_counts_as_no_request(router):
    """The supervisor's probe: a stop for an id nobody uses, answered at once from the router's
    event loop -- so a wedged loop leaves it unanswered."""
    from pdtrt.client.streams import PROBE_ID_PREFIX

    model, triton = router(engines())
    probe = stop_request(PROBE_ID_PREFIX + "abc")
    route(model, probe)
    assert ended_once(probe) and triton.calls == []
    assert triton.metrics.get("pdtrt_router_requests_total", 0) == 0
    anonymous = stop_request("")
    route(model, anonymous)
    assert ended_once(anonymous, error="a stop request needs the request id")


# -- which path --------------------------------------------------------------------------------
@pytest.mark.parametrize(("prompt_len", "models"),
                         [(1, ["aggregated"]), (3, ["aggregated"]), (4, ["prefill", "decode"]),
                          (5, ["prefill", "decode"])],
                         ids=["1-token", "just-below", "at-threshold", "just-above"])
def test_prompts_shorter_than_the_threshold_take_the_aggregated_path(router, prompt_len, models):
    model, triton = router(engines(), aggregated_model="aggregated", aggregated_below_tokens="4")
    req = request(prompt_len)
    route(model, req)
    assert [c.model for c in triton.calls] == models
    assert req.tokens == OUTPUT and ended_once(req)
    assert triton.metrics["pdtrt_router_aggregated_total"] == (models == ["aggregated"])
    if models == ["aggregated"]:
        assert triton.calls[0].request_type is RequestType.CONTEXT_AND_GENERATION


def test_without_an_aggregated_model_every_prompt_is_disaggregated(router):
    model, triton = router(engines(), aggregated_below_tokens="100")
    route(model, request(1))
    assert [c.model for c in triton.calls] == ["prefill", "decode"]


def _paths(triton) -> dict[str, float]:
    return {k: v for k, v in triton.metrics.items()
            if k.startswith("pdtrt_router_prefill_path_total{") and v}


@pytest.mark.parametrize(("prompt_len", "models", "series"), [
    (8, ["decode"], "path=local,reason=short_net_new"),
    (9, ["prefill", "decode"], "path=remote,reason=long_net_new")],
    ids=["short-local", "long-remote"])
def test_a_short_net_new_prompt_is_prefilled_by_the_decode_endpoint(router, prompt_len, models,
                                                                    series):
    """Conditional disaggregation: one context_and_generation request to a decode endpoint,
    no prefill call, no KV hand-off; the decision is counted with its reason."""
    model, triton = router(engines(), max_local_prefill_tokens="8", local_prefill_limit="64")
    req = request(prompt_len)
    route(model, req)
    assert [c.model for c in triton.calls] == models
    assert req.tokens == OUTPUT and ended_once(req)
    if models == ["decode"]:
        assert triton.calls[0].request_type is RequestType.CONTEXT_AND_GENERATION
    assert _paths(triton) == {f"pdtrt_router_prefill_path_total{{{series}}}": 1}


def test_a_queued_prefill_pool_sends_a_prompt_the_decode_engine_takes_local(router):
    model, triton = router(engines(), max_prefill_queue_depth="2", local_prefill_limit="64")
    [prefill] = model.pools["prefill"].endpoints
    prefill.num_outstanding = 2  # two calls in flight on its one instance
    req = request(40)
    route(model, req)
    assert [c.model for c in triton.calls] == ["decode"] and req.tokens == OUTPUT
    assert _paths(triton) == {
        "pdtrt_router_prefill_path_total{path=local,reason=prefill_queued}": 1}
    prefill.num_outstanding = 1
    route(model, request(40, request_id="r2"))
    assert [c.model for c in triton.calls][1:] == ["prefill", "decode"]


def test_a_local_prefill_that_fails_falls_back_to_the_aggregated_path(router):
    model, triton = router(engines(decode=lambda call: [Fail("decode is gone")]),
                           max_local_prefill_tokens="8", local_prefill_limit="64",
                           aggregated_model="aggregated", fallback_to_aggregated="true",
                           max_attempts="1")
    req = request(5)
    route(model, req)
    assert [c.model for c in triton.calls if not c.is_stop][:1] == ["decode"]
    assert "aggregated" in [c.model for c in triton.calls]
    assert req.tokens == OUTPUT and ended_once(req)


def test_a_one_token_request_needs_no_decode(router):
    """Nor a stop of the prefill: TensorRT-LLM 1.2 ignores it for a finished request (the KV
    goes at the prefill's kv_transfer_timeout_ms)."""
    model, triton = router(engines())
    req = request(max_new=1)
    route(model, req)
    assert [(c.model, c.is_stop) for c in triton.calls] == [("prefill", False)]
    assert req.tokens == [7] and ended_once(req)


def test_a_prefill_that_ended_at_the_end_id_skips_the_decode(router):
    """No first token and no context_phase_params (finish reason "stop"): the request is done,
    as upstream's disaggregated server skips the generation request."""
    model, triton = router(engines(prefill=lambda call: [tokens_out()]))
    req = request(max_new=8)
    route(model, req)
    assert [c.model for c in triton.calls] == ["prefill"]
    assert req.tokens == [] and ended_once(req)


def _stop_words(*words):
    """``stop_words_list`` in TensorRT-LLM's [1, 2, n] layout, as the preprocessing sends it:
    the words' ids, then each word's end offset padded with -1."""
    ids = [t for w in words for t in w]
    ends = [int(e) for e in np.cumsum([len(w) for w in words])]
    return np.array([[ids, ends + [-1] * (len(ids) - len(ends))]], dtype=np.int32)


# one token (the prefill's first), and two (the prompt's last token, then the first token)
STOP_AT_FIRST = [pytest.param([(OUTPUT[0],)], id="one-token-word"),
                 pytest.param([(99, 98), (24, OUTPUT[0])], id="two-token-word-from-the-prompt")]


@pytest.mark.parametrize("words", STOP_AT_FIRST)
@pytest.mark.parametrize(("streaming", "exclude_input", "early"),
                         [(True, True, "true"), (True, True, "false"), (False, False, "true")],
                         ids=["streaming", "streaming-first-from-decode", "one-response"])
def test_a_first_token_that_completes_a_stop_word_ends_the_request_without_a_decode(
        router, words, streaming, exclude_input, early):
    """The prefill ends "length" and offers its KV (TensorRT-LLM checks the length before the
    stop words), but a decode would go past the word; the aggregated path stops there, and so
    does the router: the first token, the word kept, then the final response. No decode, no
    stop of the prefill (its KV goes at its kv_transfer_timeout_ms)."""
    model, triton = router(engines(), early_first_token=early)
    req = request(max_new=8, streaming=streaming, exclude_input=exclude_input)
    req.inputs["stop_words_list"] = _stop_words(*words)
    route(model, req)
    assert [(c.model, c.is_stop) for c in triton.calls] == [("prefill", False)]
    prompt = [] if exclude_input else [20, 21, 22, 23, 24]
    assert req.tokens == [*prompt, OUTPUT[0]] and ended_once(req)
    assert triton.metrics["pdtrt_router_errors_total"] == 0


def test_a_stop_word_the_first_token_only_begins_still_gets_its_decode(router):
    model, triton = router(engines())
    req = request(max_new=8)
    req.inputs["stop_words_list"] = _stop_words((OUTPUT[0], OUTPUT[1]), (23, OUTPUT[0]))
    route(model, req)
    assert [c.model for c in triton.calls] == ["prefill", "decode"]
    assert req.tokens == OUTPUT and ended_once(req)  # the fake decode does not stop at words


# -- failures ----------------------------------------------------------------------------------
IN_BAND_FAILURE = {ERROR_OUTPUT: np.array([[b"engine failure: boom"]], dtype=object)}


@pytest.mark.parametrize("answer", [[Fail("engine failure: boom")],
                                    [tokens_out(7), tokens_out(8), IN_BAND_FAILURE]],
                         ids=["error-response", "in-band-after-data"])
def test_a_decode_failure_is_the_requests_error(router, answer):
    model, triton = router(engines(decode=lambda call: answer))
    req = request(max_new=8)
    route(model, req)
    assert triton.calls_to("prefill", stop=True) == []  # the prefill's KV goes at its timeout
    assert ended_once(req, error="decode failed: engine failure: boom")
    assert triton.metrics["pdtrt_router_errors_total"] == 1


FAILING = {"prefill": lambda call: [Fail("boom")], "decode": lambda call: [Fail("boom")]}


@pytest.mark.parametrize(
    ("phases", "req", "params", "error"),
    [(engines(), dict(), {}, None),
     (engines(), dict(streaming=False), {}, None),
     (engines(), dict(max_new=1, streaming=False), {}, None),
     (engines(), dict(prompt_len=0), {}, "the prompt is empty"),
     (engines(prefill=FAILING["prefill"]), dict(), {}, "prefill failed: boom"),
     (engines(decode=FAILING["decode"]), dict(streaming=False), {}, "decode failed: boom"),
     (engines(decode=lambda call: [tokens_out(7), RuntimeError("lost")]), dict(), {},
      "router failure: RuntimeError: lost"),
     (lambda call: [Fail("boom")], dict(prompt_len=2),
      {"aggregated_model": "aggregated", "aggregated_below_tokens": "4"},
      "aggregated failed: boom")],
    ids=["streaming", "non-streaming", "one-token", "empty-prompt", "prefill-fails",
         "decode-fails", "phase-client-raises", "aggregated-fails"])
def test_every_stream_gets_exactly_one_final_response(router, phases, req, params, error):
    model, triton = router(phases, **params)
    client = request(**req)
    route(model, client)
    assert ended_once(client, error=error)
    assert triton.metrics["pdtrt_router_errors_total"] == (error is not None)
    assert triton.metrics["pdtrt_router_requests_total"] == 1


def test_input_lengths_beyond_the_ids_is_a_request_error(router):
    model, triton = router(engines())
    req = request(3)
    req.inputs["input_lengths"] = np.array([9], dtype=np.int32)
    route(model, req)
    assert ended_once(req, error="input 'input_lengths' is 9 but 'input_ids' holds 3 tokens")
    assert triton.calls == []


@pytest.mark.parametrize(("transport", "env", "url"), [
    ("bls", {}, ""),
    ("grpc", {"PDTRT_SERVER_GRPC_URL": "0.0.0.0:8001"}, "127.0.0.1:8001"),
    ("grpc", {"PDTRT_SERVER_GRPC_URL": "10.0.0.5:9001"}, "10.0.0.5:9001"),
], ids=["bls", "wildcard-host-is-loopback", "as-given"])
def test_the_phase_transport_chooses_how_local_phases_are_called(transport, env, url):
    from pdtrt.runtime.router.config import RouterConfig

    config = RouterConfig.from_params({**ROUTER_PARAMS, Param.PHASE_TRANSPORT: transport})
    assert config.local_grpc_url(env) == url


def test_grpc_transport_without_the_servers_address_is_refused_naming_the_fix():
    from pdtrt.runtime.router.config import RouterConfig

    with pytest.raises(ValueError, match="needs the server's own gRPC address in "
                                         "PDTRT_SERVER_GRPC_URL"):
        RouterConfig.from_params({**ROUTER_PARAMS, Param.PHASE_TRANSPORT: "grpc"}
                                 ).local_grpc_url({})
