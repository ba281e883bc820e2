"""OpenAI request bodies at the edge (pdtrt.front.protocol) and the context window."""

from __future__ import annotations

import json

import pytest

from pdtrt.errors import ApiError
from pdtrt.front.engine_client import engine_inputs
from pdtrt.front.protocol import (
    ChatBody,
    CompletionBody,
    chat_sampling,
    completion_sampling,
    parse_body,
)
from tests.front.fakes import deployment

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _chat(**extra):
    return chat_sampling(parse_body(json.dumps({**CHAT, **extra}).encode(), ChatBody))


@pytest.mark.parametrize(("raw", "message", "param"), [
    (b"{not json", "the request body is not JSON", None),
    (b"[1]", "the request body must be a JSON object", None),
    (json.dumps({**CHAT, "temprature": 1}).encode(),
     "Unrecognized request argument supplied: temprature", "temprature"),
    (json.dumps({**CHAT, "temperature": 3}).encode(), "temperature: Input should be less",
     "temperature"),
    (json.dumps({"model": "m", "messages": []}).encode(), "messages: List should have at least 1",
     "messages"),
    (json.dumps({"model": "m", "messages": [{"role": "robot", "content": "x"}]}).encode(),
     "messages.0.role", "messages.0.role"),
], ids=["not-json", "not-object", "unknown-field", "out-of-range", "no-messages", "bad-role"])
def test_a_bad_body_is_a_400_that_names_the_field(raw, message, param):
    with pytest.raises(ApiError) as err:
        parse_body(raw, ChatBody)
    assert err.value.status == 400 and err.value.message.startswith(message)
    assert err.value.param == param


@pytest.mark.parametrize(("extra", "field"), [
    ({"n": 2}, "n"), ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"top_logprobs": 0}, "top_logprobs"), ({"tools": [{"type": "function"}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"logit_bias": {"5": 1.0}}, "logit_bias"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"max_tokens": 5, "max_completion_tokens": 6}, "max_completion_tokens"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_what_the_engines_cannot_honour_is_refused_not_ignored(extra, field):
    with pytest.raises(ApiError) as err:
        _chat(**extra)
    assert err.value.param == field and err.value.status == 400


def test_openai_defaults_become_sampling_not_tensorrt_llms_greedy():
    s = _chat()
    assert (s.sampling.temperature, s.sampling.top_p, s.sampling.top_k, s.max_tokens,
            s.stop) == (1.0, 1.0, 0, None, ())
    inputs = engine_inputs([5, 6], s, max_tokens=9, end_id=2, pad_id=0)
    assert inputs["temperature"].item() == 1.0 and inputs["runtime_top_p"].item() == 1.0
    assert inputs["end_id"].item() == 2 and inputs["request_output_len"].item() == 9
    assert "random_seed" not in inputs and "return_log_probs" not in inputs


def test_every_supported_field_reaches_the_engine_inputs():
    s = _chat(temperature=0, top_p=0.5, seed=7, stop="x", presence_penalty=0.5,
              frequency_penalty=-0.5, max_completion_tokens=4, logprobs=True, top_k=3,
              min_tokens=2, repetition_penalty=1.1, ignore_eos=True, stream=True,
              stream_options={"include_usage": True})
    assert s.stop == ("x",) and s.include_usage and s.max_tokens == 4
    got = {k: v.item() for k, v in engine_inputs([1], s, max_tokens=4, end_id=2,
                                                  pad_id=None).items() if v.size == 1}
    assert got["end_id"] == -1  # ignore_eos
    assert (got["temperature"], got["random_seed"], got["runtime_top_k"], got["min_length"],
            got["return_log_probs"]) == (0.0, 7, 3, 2, True)
    assert got["presence_penalty"] == 0.5 and got["frequency_penalty"] == -0.5
    assert got["repetition_penalty"] == pytest.approx(1.1)


def test_completion_bodies():
    body = parse_body(json.dumps({"model": "m", "prompt": "x"}).encode(), CompletionBody)
    assert completion_sampling(body).max_tokens == 16  # OpenAI's completions default
    for bad, field in (({"echo": True}, "echo"), ({"logprobs": 21}, "logprobs"),
                       ({"best_of": 2}, "best_of"), ({"suffix": "s"}, "suffix")):
        body = parse_body(json.dumps({"model": "m", "prompt": "x", **bad}).encode(),
                          CompletionBody)
        with pytest.raises(ApiError) as err:
            completion_sampling(body)
        assert err.value.param == field


@pytest.mark.parametrize(("prompt", "max_tokens", "budget", "message"), [
    (10, None, 54, None), (10, 54, 54, None),
    (10, 55, None, "max_tokens is 55, but the context window of 64 tokens leaves 54"),
    (57, None, None, "the prompt has 57 tokens; this deployment takes at most 56"),
], ids=["default-fills-the-window", "exactly", "too-many", "prompt-too-long"])
def test_the_context_window(prompt, max_tokens, budget, message):
    dep = deployment(max_seq_len=64)
    if message is None:
        assert dep.output_budget(prompt, max_tokens) == budget
        return
    with pytest.raises(ApiError) as err:
        dep.output_budget(prompt, max_tokens)
    assert err.value.message.startswith(message)
    assert err.value.code == "context_length_exceeded"


def test_top_logprobs_up_to_the_engines_limit_reach_the_router_and_above_it_are_a_400():
    """Chat ``top_logprobs`` N and completions ``logprobs`` N become the router's
    ``num_top_log_probs`` (with ``return_log_probs``); above MAX_TOP_LOG_PROBS (20) a 400 that
    names the limit, rather than fewer alternatives than asked."""
    from pdtrt.engine_io import MAX_TOP_LOG_PROBS, TOP_LOG_PROBS_INPUT

    chat = _chat(logprobs=True, top_logprobs=5)
    inputs = engine_inputs([1], chat, max_tokens=4, end_id=2, pad_id=None)
    assert inputs[TOP_LOG_PROBS_INPUT].item() == 5 and inputs["return_log_probs"].item()
    assert _chat(logprobs=True, top_logprobs=MAX_TOP_LOG_PROBS).top_logprobs == 20
    assert TOP_LOG_PROBS_INPUT not in engine_inputs([1], _chat(logprobs=True), max_tokens=4,
                                                    end_id=2, pad_id=None)
    with pytest.raises(ApiError) as err:
        _chat(logprobs=True, top_logprobs=21)
    assert err.value.status == 400 and err.value.message == (
        "'top_logprobs' is 21; pdtrt's engines return at most 20 alternatives per token")

    def completion(**extra):
        return completion_sampling(parse_body(json.dumps(
            {"model": "m", "prompt": "x", **extra}).encode(), CompletionBody))

    three = completion(logprobs=3)
    assert three.logprobs and three.top_logprobs == 3
    zero = completion(logprobs=0)  # the chosen token's log-probability only
    assert zero.logprobs and zero.top_logprobs == 0
    with pytest.raises(ApiError) as err:
        completion(logprobs=21)
    assert err.value.param == "logprobs" and "at most 20" in err.value.message
