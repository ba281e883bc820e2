"""The reference LLM under each ``sampler_type``, as TensorRT-LLM 1.2 picks and runs them.

TRTLLMSampler (the C++ decoder) applies every sampling field; 1.2's TorchSampler -- what
``auto`` means at beam width 1 -- ignores the penalties (TensorRT-LLM #16485) and bad words
(#16052), draws from one generator seeded 42 for all requests instead of the request's seed
(#17172), and counts the prompt's tokens toward ``min_tokens`` (#12166). Each test shows the
TorchSampler rule next to TRTLLMSampler's, on the tiny seeded Llama (no UCX: aggregated LLMs).
"""

from __future__ import annotations

import pytest

from pdtrt.llmapi.reference import LLM, SamplingParams
from pdtrt.llmapi.reference.options import ReferenceLlmArgs

PROMPT = [5, 60, 61, 62, 63, 64, 7]
OPTIONS = {"max_batch_size": 4, "max_num_tokens": 64, "max_seq_len": 64,
           "kv_cache_config": {"tokens_per_block": 16, "enable_block_reuse": False}}


@pytest.fixture
def new_llm(tiny_model):
    """``new_llm(sampler_type)``: a fresh reference LLM over the tiny model, shut down after."""
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    made: list[LLM] = []

    def make(sampler_type: str) -> LLM:
        made.append(LLM._from_engine(ReferenceEngine(tiny_model, tokens_per_block=16),
                                     **OPTIONS, sampler_type=sampler_type))
        return made[-1]

    yield make
    for llm in made:
        llm.shutdown()


def _tokens(llm: LLM, **params) -> list[int]:
    ids = {n: params.pop(n) for n in ("_bad_word_ids",) if n in params}
    sampling = SamplingParams(**{"max_tokens": 10, "end_id": -1, **params})
    for name, value in ids.items():  # init=False: set after construction, as without a tokenizer
        setattr(sampling, name, value)
    return list(llm.generate_async(PROMPT, sampling).result(timeout=60).outputs[0].token_ids)


@pytest.mark.parametrize(("options", "torch"), [
    ({}, True),  # upstream's default, auto: TorchSampler at beam width 1
    ({"sampler_type": "auto", "max_beam_width": 2}, False),  # auto with beam search
    ({"sampler_type": "TorchSampler"}, True),
    ({"sampler_type": "TRTLLMSampler"}, False),
], ids=["default", "auto-beam-search", "torch", "trtllm"])
def test_the_sampler_is_upstreams_choice(options, torch):
    args = ReferenceLlmArgs.from_kwargs(options)
    assert args.torch_sampler is torch


def test_an_unknown_sampler_is_refused_like_llmargs():
    with pytest.raises(ValueError, match="LLM option 'sampler_type'"):
        ReferenceLlmArgs.from_kwargs({"sampler_type": "torch"})


def test_torch_sampler_ignores_penalties_and_bad_words(new_llm):
    trtllm, torch = new_llm("TRTLLMSampler"), new_llm("TorchSampler")
    base = _tokens(trtllm)
    assert _tokens(torch) == base  # greedy is greedy in both
    shaping = {"repetition_penalty": 1.5, "presence_penalty": 0.5, "frequency_penalty": 0.3,
               "bad_token_ids": [base[1]], "bad": ["ids"], "_bad_word_ids": [base[3:5]]}
    shaped = _tokens(trtllm, **shaping)
    assert shaped != base and base[1] not in shaped  # the C++ decoder applies them
    assert _tokens(torch, **shaping) == base  # 1.2's TorchSampler: as if they were not set


def test_torch_sampler_ignores_the_seed_and_shares_one_generator(new_llm):
    sampled = {"temperature": 1.0, "top_k": 50}
    # TRTLLMSampler: the request's seed decides its draws, whatever ran before
    trtllm = new_llm("TRTLLMSampler")
    seven = _tokens(trtllm, seed=7, **sampled)
    assert _tokens(trtllm, seed=8, **sampled) != seven
    assert _tokens(trtllm, seed=7, **sampled) == seven
    # TorchSampler: a fresh LLM draws the same whatever the seed (one generator, seeded 42) ...
    first = [_tokens(new_llm("TorchSampler"), seed=seed, **sampled) for seed in (7, 8, None)]
    assert first[0] == first[1] == first[2]
    # ... and a request's draws depend on the draws before it, not on its seed
    torch = new_llm("TorchSampler")
    assert _tokens(torch, seed=7, **sampled) == first[0]
    assert _tokens(torch, seed=7, **sampled) != first[0]


def test_torch_sampler_counts_the_prompt_toward_min_tokens(new_llm):
    trtllm, torch = new_llm("TRTLLMSampler"), new_llm("TorchSampler")
    base = _tokens(trtllm)
    eos = base[2]  # ends the output at its third token unless min_tokens holds it off
    assert _tokens(trtllm, end_id=eos) == base[:2]
    held = _tokens(trtllm, end_id=eos, min_tokens=6)
    assert len(held) >= 6 and held[:2] == base[:2]
    # TorchSampler: 6 <= the 7 prompt tokens, so nothing is banned ...
    assert _tokens(torch, end_id=eos, min_tokens=6) == base[:2]
    # ... and the prompt's length plus 6 bans the end id for the same 6 generated tokens
    assert _tokens(torch, end_id=eos, min_tokens=len(PROMPT) + 6) == held
