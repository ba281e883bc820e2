"""The reference LLM API on SmolLM2-135M-Instruct: greedy output equal to transformers'
``generate()`` on real chat prompts, aggregated and disaggregated (context_only in another
process, the KV pulled over real UCX: 30 layers x 3 KV heads x 64 x 2 x 4 bytes per prompt
token), ending at ``<|im_end|>``. Runs in a pytest process of its own, like
test_reference_llm.py (ucxx's one context per process), started by
test_smollm2_llm_process.py with the built deployment's directory."""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from tests.llmapi.ctx_peer import OPTIONS

DIR_ENV = "PDTRT_TEST_SMOLLM2_DIR"  # engines/<deployment> of a built smollm2-cpu.yaml
PROMPTS = ["What is the capital of France?", "Name a primary color.", "What is 2 + 2?"]
MAX_TOKENS = 16
END_ID = 2  # <|im_end|>
KV_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 4  # GQA, fp32
AGGREGATED = {k: v for k, v in OPTIONS.items() if k != "cache_transceiver_config"}

pytestmark = [
    pytest.mark.skipif(os.environ.get("PDTRT_TEST_OWN_PROCESS") != Path(__file__).name
                       or not os.environ.get(DIR_ENV),
                       reason="runs in a process of its own (test_smollm2_llm_process.py)"),
    pytest.mark.skipif(importlib.util.find_spec("ucxx") is None,
                       reason="ucxx (ucxx-cu12) is not installed"),
]


def _dir(name: str) -> str:
    return str(Path(os.environ[DIR_ENV]) / name)


async def _generate(llm, prompt, **kwargs):
    params = SamplingParams(max_tokens=MAX_TOKENS, end_id=END_ID)
    return await llm.generate_async(prompt, params, **kwargs).aresult()


@pytest.fixture(scope="module")
def prompts():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(_dir("tokenizer"))
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                     add_generation_prompt=True) for p in PROMPTS]
    return tok, [tok.encode(t, add_special_tokens=False) for t in texts]


@pytest.fixture(scope="module")
def context_peer():
    from tests.llmapi.ctx_peer import running_context_peer

    with running_context_peer(_dir("prefill"), ready_s=180, reply_s=120) as call:
        yield call


def test_greedy_disaggregated_equals_aggregated_equals_transformers(prompts, context_peer):
    import torch
    from transformers import AutoModelForCausalLM

    tok, ids = prompts
    model = AutoModelForCausalLM.from_pretrained(_dir("decode")).eval()
    expected = []
    for prompt in ids:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS,
                                 do_sample=False, eos_token_id=END_ID, pad_token_id=END_ID)
        expected.append(out[0, len(prompt):].tolist())
    assert "Paris" in tok.decode(expected[0]) and expected[0][-1] == END_ID

    gen = LLM(_dir("decode"), skip_tokenizer_init=True, **OPTIONS)
    try:
        for prompt, want in zip(ids, expected, strict=True):
            ctx = context_peer("context", prompt)
            before = gen._pdtrt_kv_transfer_stats()["pulled_bytes"]
            params = DisaggregatedParams(request_type="generation_only",
                                         first_gen_tokens=ctx["first_gen_tokens"],
                                         ctx_request_id=ctx["ctx_request_id"],
                                         opaque_state=ctx["opaque_state"])
            out = asyncio.run(_generate(gen, prompt, disaggregated_params=params)).outputs[0]
            pulled = gen._pdtrt_kv_transfer_stats()["pulled_bytes"] - before
            assert out.token_ids == [t for t in want if t != END_ID], PROMPTS[ids.index(prompt)]
            assert pulled == len(prompt) * KV_BYTES_PER_TOKEN
            if want[-1] == END_ID:
                assert out.finish_reason == "stop"
    finally:
        gen.shutdown()
    agg = LLM(_dir("prefill"), skip_tokenizer_init=True, **AGGREGATED)
    try:
        for prompt, want in zip(ids, expected, strict=True):
            out = asyncio.run(_generate(agg, prompt)).outputs[0]
            assert out.token_ids == [t for t in want if t != END_ID]
    finally:
        agg.shutdown()
