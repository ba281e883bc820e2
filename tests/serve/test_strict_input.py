"""Strict input on the real server (issue 15, item 5): every value TensorRT-LLM refuses is refused
with a message naming the input, the value and what is allowed -- through the disaggregated and
the aggregated ensemble, the router and the aggregated engine model alike -- and the server
keeps serving exact output afterwards (oracle: transformers generate(), as in test_e2e.py)."""

from __future__ import annotations

import numpy as np
import pytest
from e2e_client import _input, engine_inputs, ensemble_inputs, generate

from tests.serve.test_e2e import oracle  # noqa: F401 -- the module-scoped fixture, reused

pytestmark = [pytest.mark.triton, pytest.mark.slow]

F32, I32 = (np.float32, "FP32"), (np.int32, "INT32")
# (id, ensemble input, engine input, value, dtype, the message every path must carry)
CASES = [
    ("temperature-nan", "temperature", "temperature", np.nan, F32,
     "input 'temperature' is nan; allowed: a finite number >= 0"),
    ("temperature-negative", "temperature", "temperature", -1.0, F32,
     "input 'temperature' is -1.0; allowed: a finite number >= 0"),
    ("top-p-7", "top_p", "runtime_top_p", 7.0, F32,
     "input 'runtime_top_p' (the ensemble's 'top_p') is 7.0; allowed: (0, 1], or 0 for none"),
    ("top-k-negative", "top_k", "runtime_top_k", -3, I32,
     "input 'runtime_top_k' (the ensemble's 'top_k') is -3; allowed: >= 0"),
    ("repetition-penalty-0", "repetition_penalty", "repetition_penalty", 0.0, F32,
     "input 'repetition_penalty' is 0.0; allowed: a finite number > 0"),
    ("beam-width-4", "beam_width", "beam_width", 4, I32,
     "input 'beam_width' is 4; allowed: 1..1 (the engine's max_beam_width)"),
]
PATHS = ["ensemble", "ensemble_aggregated", "router", "aggregated"]
IDS = [1, 40, 41, 42, 43]


def _url(reference_server) -> str:
    return reference_server[0].endpoints.grpc_url


def _one(name: str, value, dtype) -> list:
    return [_input(name, np.array([[value]], dtype=dtype[0]), dtype[1])]


def _refused(url: str, model: str, extra: list, text: str = "Hello there") -> str | None:
    if model.startswith("ensemble"):
        got = generate(url, model, ensemble_inputs(text, 8) + extra)
    else:
        got = generate(url, model, engine_inputs(IDS, 8, extra), output="output_ids")
    assert got.texts == [], f"{model} answered with data"
    return got.error


def _serves_exact_output(url: str, oracle) -> None:  # noqa: F811 -- the fixture, by name
    _tok, expected = oracle
    prompt = "The quick brown fox jumps over the lazy dog"
    for model in ("ensemble", "ensemble_aggregated"):
        got = generate(url, model, ensemble_inputs(prompt, 12))
        assert got.error is None and got.final_seen and got.texts == expected(prompt, 12)[1]


@pytest.mark.parametrize(("ensemble_name", "engine_name", "value", "dtype", "message"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_tensorrt_llm_refuses_is_refused_on_every_path(
        reference_server, oracle, ensemble_name, engine_name, value, dtype, message):  # noqa: F811
    url = _url(reference_server)
    for model in PATHS:
        name = ensemble_name if model.startswith("ensemble") else engine_name
        error = _refused(url, model, _one(name, value, dtype))
        prefix = f"in ensemble '{model}', " if model.startswith("ensemble") else ""
        assert error is not None and f"{prefix}{message}" in error, (model, error)
    _serves_exact_output(url, oracle)


def test_more_than_one_prompt_is_refused_on_every_path(reference_server, oracle):  # noqa: F811
    url = _url(reference_server)
    one_per_request = "pdtrt serves one prompt per request: send each prompt as its own request"
    two_texts = [_input("text_input", np.array([[b"Hello"], [b"World"]], dtype=object), "BYTES"),
                 _input("max_tokens", np.array([[8], [8]], dtype=np.int32), "INT32"),
                 _input("stream", np.array([[True], [True]]), "BOOL")]
    for model in ("ensemble", "ensemble_aggregated"):
        got = generate(url, model, two_texts)
        assert got.error == (f"in ensemble '{model}', input 'text_input' holds 2 prompts; "
                             f"{one_per_request}"), got.error
    two_rows = [_input("input_ids", np.array([[1, 40, 41], [1, 50, 51]], dtype=np.int32),
                       "INT32"),
                _input("input_lengths", np.array([[3], [3]], dtype=np.int32), "INT32"),
                _input("request_output_len", np.array([[8], [8]], dtype=np.int32), "INT32"),
                _input("streaming", np.array([[True], [True]]), "BOOL")]
    for model in ("router", "aggregated"):
        got = generate(url, model, two_rows, output="output_ids")
        assert got.error == f"input 'input_ids' holds 2 prompts; {one_per_request}", got.error
    _serves_exact_output(url, oracle)


@pytest.mark.parametrize("length", [9, 3], ids=["more-than-the-ids", "fewer-than-the-ids"])
def test_input_lengths_that_disagree_with_the_ids_are_refused(reference_server, oracle,  # noqa: F811
                                                               length):
    url = _url(reference_server)
    for model in ("router", "aggregated", "prefill"):
        inputs = engine_inputs(IDS, 8)
        inputs[1] = _input("input_lengths", np.array([[length]], dtype=np.int32), "INT32")
        got = generate(url, model, inputs, output="output_ids")
        assert got.error == (f"input 'input_lengths' is {length} but 'input_ids' holds 5 "
                             "tokens; allowed: exactly 5"), (model, got.error)
    _serves_exact_output(url, oracle)


def test_the_edges_tensorrt_llm_allows_are_served(reference_server, oracle):  # noqa: F811
    """temperature 0 is greedy, top_p 0 means none: the exact greedy output."""
    url = _url(reference_server)
    _tok, expected = oracle
    prompt = "In a hole in the ground"
    extra = _one("temperature", 0.0, F32) + _one("top_p", 0.0, F32) + _one("beam_width", 1, I32)
    for model in ("ensemble", "ensemble_aggregated"):
        got = generate(url, model, ensemble_inputs(prompt, 10) + extra)
        assert got.error is None and got.texts == expected(prompt, 10)[1], model
