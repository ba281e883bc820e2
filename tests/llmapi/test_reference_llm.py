"""The reference LLM API on the tiny seeded Llama: greedy output equal to transformers'
``generate()``, aggregated and disaggregated (context_only in another process, the KV pulled
over real UCX on this host, generation_only here), abort, and options refused like LlmArgs."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from tests.llmapi.ctx_peer import OPTIONS
from tests.runtime.conftest import hf_greedy

PROMPT = [5, 60, 61, 62, 63, 64, 7]
AGGREGATED = {k: v for k, v in OPTIONS.items() if k != "cache_transceiver_config"}
needs_ucx = pytest.mark.skipif(importlib.util.find_spec("ucxx") is None,
                               reason="ucxx (ucxx-cu12) is not installed")

# ucxx allows one context per process, bound to the event loop that was running when it was
# created (pdtrt/llmapi/reference/kv_transfer.py, _init_ucxx); this module's LLMs create UCX
# nodes and close their loops, which breaks every later UCX node of the same process (measured:
# tests/llmapi/test_kv_transfer.py after this module, "Future attached to a different loop").
# So its tests run in a pytest process of their own (test_reference_llm_process.py).
_OWN_PROCESS_ENV = "PDTRT_TEST_OWN_PROCESS"
_OWN_PROCESS = os.environ.get(_OWN_PROCESS_ENV) == Path(__file__).name
pytestmark = pytest.mark.skipif(
    not _OWN_PROCESS, reason="runs in a process of its own (test_reference_llm_process.py)")


def run(coro):
    return asyncio.run(coro)


async def generate(llm, prompt, n, **kwargs):
    return await submit(llm, prompt, SamplingParams(max_tokens=n, end_id=-1), **kwargs)


async def submit(llm, prompt, params, **kwargs):
    """generate_async inside the event loop the result then wakes."""
    return await llm.generate_async(prompt, params, **kwargs).aresult()


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    made = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **AGGREGATED)
    yield made
    made.shutdown()


def test_aggregated_greedy_equals_transformers(llm, tiny_model):
    result = run(generate(llm, PROMPT, 10))
    assert result.finished and result.outputs[0].finish_reason == "length"
    assert result.outputs[0].token_ids == hf_greedy(tiny_model, PROMPT, 10)


def test_streaming_grows_token_ids_step_by_step(llm):
    async def steps():
        result = llm.generate_async(PROMPT, SamplingParams(max_tokens=5, end_id=-1),
                                    streaming=True)
        return [(list(s.outputs[0].token_ids_diff), s.finished) async for s in result]

    seen = run(steps())
    assert [len(diff) for diff, _ in seen] == [1] * 5 and [f for _, f in seen][-1]


class Gate:
    def __init__(self) -> None:
        self.open = threading.Event()

    def before_decode(self, request_ids) -> None:
        assert self.open.wait(10)


def test_abort_ends_the_request_as_cancelled(tiny_model_dir):
    llm = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **AGGREGATED)
    gate = Gate()
    llm._pdtrt_set_fault_hook(gate)

    async def aborted():
        result = llm.generate_async(PROMPT, SamplingParams(max_tokens=50, end_id=-1),
                                    streaming=True)
        first = await result.__anext__()
        result.abort()
        gate.open.set()
        await result.aresult()
        return first.outputs[0].token_ids, result

    try:
        tokens, result = run(aborted())
    finally:
        llm.shutdown()
    assert result.aborted() and result.finished and result.outputs[0].finish_reason == "cancelled"
    assert 1 <= len(tokens) < 50


@pytest.mark.parametrize(("options", "error"), [
    ({"max_batch_sise": 4}, "LLM option 'max_batch_sise': Extra inputs are not permitted "
                            "(did you mean 'max_batch_size'?)"),
    ({"kv_cache_config": {"tokens_per_blok": 16}},
     "LLM option 'kv_cache_config.tokens_per_blok': Extra inputs are not permitted "
     "(did you mean 'tokens_per_block'?)"),
    ({"cache_transceiver_config": {"backend": "ucx"}},
     "LLM option 'cache_transceiver_config.backend': Input should be"),
], ids=["unknown-key", "unknown-nested-key", "wrong-enum"])
def test_unknown_options_are_refused_like_llmargs(tiny_model_dir, options, error):
    with pytest.raises(ValueError) as err:
        LLM(str(tiny_model_dir), **options)
    assert str(err.value).startswith(error)


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"sampling_params": None}, "a tokenizer is required to set end_id"),
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2, repetition_penalty=1.3)},
     "the reference LLM does not implement repetition_penalty"),
    ({"sampling_params": SamplingParams(max_tokens=64, end_id=2)}, "exceeds max_seq_len (64)"),
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2),
      "disaggregated_params": DisaggregatedParams(request_type="context_only")},
     "context_only requests need cache_transceiver_config"),
], ids=["no-end-id", "unimplemented-penalty", "too-long", "no-transceiver"])
def test_what_the_engine_cannot_serve_is_refused_at_once(llm, kwargs, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        llm.generate_async(PROMPT, **kwargs)


def test_request_type_is_checked_like_upstream():
    assert DisaggregatedParams(request_type="Context_Only").request_type == "context_only"
    with pytest.raises(ValueError, match="Unknown request type: prefill"):
        DisaggregatedParams(request_type="prefill")


@pytest.fixture(scope="module")
def context_peer(tiny_model_dir):
    from tests.llmapi.ctx_peer import context_process

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=context_process, args=(child, str(tiny_model_dir)), daemon=True)
    proc.start()
    assert parent.poll(120) and parent.recv() == "ready"

    def call(cmd, arg=None):
        parent.send((cmd, arg))
        assert parent.poll(60)
        return parent.recv()

    yield call
    call("stop")
    proc.join(10)


@needs_ucx
def test_context_then_generation_over_ucx_equals_aggregated(context_peer, tiny_model_dir, llm,
                                                           tiny_model):
    ctx = context_peer("context", PROMPT)
    assert ctx["token_ids"] == ctx["first_gen_tokens"] and len(ctx["first_gen_tokens"]) == 1
    assert context_peer("stats")["held"] == 1
    gen = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **OPTIONS)
    params = DisaggregatedParams(request_type="generation_only",
                                 first_gen_tokens=ctx["first_gen_tokens"],
                                 ctx_request_id=ctx["ctx_request_id"],
                                 opaque_state=ctx["opaque_state"])
    try:
        result = run(generate(gen, PROMPT, 10, disaggregated_params=params))
        # the KV has been pulled: a second pull finds nothing
        with pytest.raises(RuntimeError, match="KV transfer failed: the prefill instance no "
                                               "longer holds"):
            run(generate(gen, PROMPT, 10, disaggregated_params=params))
        stats = gen._pdtrt_kv_transfer_stats()
    finally:
        gen.shutdown()
    assert result.outputs[0].token_ids == run(generate(llm, PROMPT, 10)).outputs[0].token_ids \
        == hf_greedy(tiny_model, PROMPT, 10)
    assert stats["pulled"] == 1 and stats["pulled_bytes"] > 0
    assert context_peer("stats")["held"] == 0


@needs_ucx
def test_a_finished_context_request_holds_its_kv_until_the_timeout_whatever_abort_says(
        tiny_model_dir, tiny_model, caplog):
    """TensorRT-LLM 1.2: context_only forces max_tokens 1; abort() of the finished request is
    ignored (base_worker.abort_request), its KV goes at kv_transfer_timeout_ms; an end id as
    the first token ends it "stop" with the caller's params and nothing held."""
    caplog.set_level(logging.INFO, logger="pdtrt.llmapi.reference.llm")
    timeout_ms = 1500
    llm = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **{
        **OPTIONS, "cache_transceiver_config": {"backend": "UCX",
                                                "kv_transfer_timeout_ms": timeout_ms}})
    context = DisaggregatedParams(request_type="context_only")
    try:
        params = SamplingParams(max_tokens=10, end_id=-1)
        result = run(submit(llm, PROMPT, params, disaggregated_params=context))
        out = result.outputs[0]
        assert params.max_tokens == 1 and len(out.token_ids) == 1  # forced, on the caller's
        assert out.finish_reason == "length" and out.disaggregated_params.opaque_state
        result.abort()
        assert llm._pdtrt_kv_transfer_stats()["held"] == 1  # abort freed nothing
        assert "is finished, cannot abort it" in caplog.text
        deadline = time.monotonic() + timeout_ms / 1000 + 2
        while llm._pdtrt_kv_transfer_stats()["held"] and time.monotonic() < deadline:
            time.sleep(0.1)
        stats = llm._pdtrt_kv_transfer_stats()
        assert stats["held"] == 0 and stats["expired"] == 1

        eos = hf_greedy(tiny_model, PROMPT, 1)[0]
        ended = run(submit(llm, PROMPT, SamplingParams(max_tokens=1, end_id=eos),
                           disaggregated_params=context)).outputs[0]
        assert ended.finish_reason == "stop" and ended.token_ids == []
        assert ended.disaggregated_params is context  # the caller's, no opaque_state
        assert llm._pdtrt_kv_transfer_stats()["offered"] == 1  # nothing held for it
    finally:
        llm.shutdown()


def test_get_stats_is_empty_without_iteration_stats_and_before_the_first_request(tiny_model_dir):
    quiet = LLM(str(tiny_model_dir), skip_tokenizer_init=True,
                **{**AGGREGATED, "enable_iter_perf_stats": False})
    counting = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **AGGREGATED)
    try:
        assert counting.get_stats(0) == []  # nothing before the first request
        run(generate(quiet, PROMPT, 2))
        run(generate(counting, PROMPT, 2))
        assert quiet.get_stats(0) == []
        [stats] = counting.get_stats(0)
        assert stats["kvCacheStats"]["maxNumBlocks"] > 0 and "numQueuedRequests" in stats
    finally:
        quiet.shutdown()
        counting.shutdown()


@pytest.mark.parametrize("params", [
    DisaggregatedParams(request_type="context_only", draft_tokens=[1, 2]),
    DisaggregatedParams(request_type="context_only", ctx_dp_rank=1),
    DisaggregatedParams(request_type="context_only", schedule_style=1),
], ids=["draft-tokens", "attention-dp", "generation-first"])
def test_disaggregated_params_the_reference_cannot_honour_are_refused(llm, params):
    with pytest.raises(ValueError, match="does not implement DisaggregatedParams"):
        llm.generate_async(PROMPT, SamplingParams(max_tokens=1, end_id=-1),
                           disaggregated_params=params)
