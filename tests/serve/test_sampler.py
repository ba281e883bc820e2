"""``<pool>.engine.sampler: TorchSampler`` on the real server: every sampling input TensorRT-LLM
1.2's TorchSampler would silently ignore is refused with one clear error through both
ensembles (the engine models' check, pdtrt/runtime/engine/sampler.py), and greedy output is
what it is under the default TRTLLMSampler (transformers' ``generate()``; that deployment's
sampling rules are test_e2e.py's)."""

from __future__ import annotations

import pytest
from conftest import serve_edited_reference
from e2e_client import ensemble_inputs, generate, sampling_inputs, transformers_oracle

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The quick brown fox jumps over the lazy dog"
MODELS = ("ensemble", "ensemble_aggregated")
FIX = "set prefill.engine.sampler TRTLLMSampler"  # both paths start on the prefill pool


@pytest.fixture(scope="module")
def torch_sampler(reference_engines, tmp_path_factory):
    """The reference deployment with both pools on TorchSampler (same engines)."""
    root, _dep = reference_engines
    pool_engine = "    tokens_per_block: 16\n"  # in prefill's and decode's engine sections
    server, prepared = serve_edited_reference(
        root, tmp_path_factory.mktemp("torch-sampler"), old=pool_engine,
        new=pool_engine + "    sampler: TorchSampler\n", count=2)
    yield server.endpoints.grpc_url, prepared
    server.stop()


@pytest.fixture(scope="module")
def greedy_tokens(torch_sampler):
    """``greedy_tokens(prompt, n)``: the per-token texts of transformers' greedy generate()."""
    _tok, expected = transformers_oracle(torch_sampler[1].repository)
    return lambda prompt, n: expected(prompt, n)[1]


@pytest.mark.parametrize("model", MODELS)
def test_greedy_output_is_unchanged(torch_sampler, greedy_tokens, model):
    url, _prepared = torch_sampler
    got = generate(url, model, ensemble_inputs(PROMPT, 12))
    assert got.error is None and got.final_seen
    assert got.texts == greedy_tokens(PROMPT, 12)


SAMPLED = {"temperature": 0.9, "top_k": 50}


@pytest.mark.parametrize(("values", "named"), [
    ({"repetition_penalty": 1.4}, "ignores input 'repetition_penalty' (1.4; TensorRT-LLM "
     "#16485)"),
    ({"presence_penalty": 0.5}, "ignores input 'presence_penalty' (0.5; TensorRT-LLM #16485)"),
    ({"frequency_penalty": 0.3}, "ignores input 'frequency_penalty' (0.3; TensorRT-LLM "
     "#16485)"),
    ({"bad_words": ["fox"]}, "ignores input 'bad_words_list' (the ensemble's 'bad_words'; "
     "TensorRT-LLM #16052)"),
    ({"random_seed": 11, **SAMPLED}, "ignores input 'random_seed' (11) and draws every "
     "request's tokens from one generator seeded 42 (TensorRT-LLM #17172)"),
    ({"min_length": 10}, "counts the prompt's tokens toward input 'min_length' (10)"),
], ids=["repetition-penalty", "presence-penalty", "frequency-penalty", "bad-words", "seed",
        "min-length"])
def test_each_input_torch_sampler_ignores_is_refused_on_both_paths(torch_sampler, values,
                                                                   named):
    url, _prepared = torch_sampler
    for model in MODELS:
        got = generate(url, model, ensemble_inputs(PROMPT, 8) + sampling_inputs(**values))
        assert got.error is not None and got.texts == [], (model, got)
        assert "this engine samples with TensorRT-LLM 1.2's TorchSampler, which" in got.error
        assert named in got.error and FIX in got.error, (model, got.error)


@pytest.mark.parametrize("values", [{"random_seed": 11}, SAMPLED, {"min_length": 1}],
                         ids=["seed-of-a-greedy-request", "sampled-without-seed",
                              "min-length-1"])
def test_what_torch_sampler_does_is_served(torch_sampler, values):
    url, _prepared = torch_sampler
    for model in MODELS:
        got = generate(url, model, ensemble_inputs(PROMPT, 8) + sampling_inputs(**values))
        assert got.error is None and got.final_seen and got.texts, (model, got)
