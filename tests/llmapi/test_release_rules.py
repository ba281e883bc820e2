"""The twin says no where TensorRT-LLM 1.2.1 says no: its refusals, its clamp, its greedy rule,
and the KV held for pickup that fills a context server's pool.

The reference LLM runs in memory over the tiny seeded Llama with the in-process stand-in for the
UCX transceiver (tests/runtime/fake_transceiver.py), so no UCX context is made here.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_transceiver import FakeTransceiver

PROMPT = [5, 60, 61, 62, 63, 64, 7]
BASE = {"max_batch_size": 4, "max_num_tokens": 16, "max_seq_len": 32,
        "kv_cache_config": {"tokens_per_block": 8}}
PHASE = {**BASE, "disable_overlap_scheduler": True,
         "cache_transceiver_config": {"backend": "UCX", "kv_transfer_timeout_ms": 1000}}


@pytest.fixture
def make(tiny_model):
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    made = []
    engine = ReferenceEngine(tiny_model, tokens_per_block=8)

    def build(options, transceiver=None):
        llm = LLM._from_engine(engine, transceiver=transceiver, **options)
        made.append(llm)
        return llm

    build.engine = engine
    yield build
    for llm in made:
        llm.shutdown()


def _result(llm, prompt, params, **kwargs):
    async def go():
        return await llm.generate_async(prompt, params, **kwargs).aresult()
    return asyncio.run(go())


def test_a_context_only_request_is_refused_while_the_overlap_scheduler_is_on(make):
    """base_worker._enqueue_request in 1.2 (the guard went with main's #12816, after 1.2.1)."""
    llm = make({**PHASE, "disable_overlap_scheduler": False},
               FakeTransceiver(make.engine.layout))
    with pytest.raises(ValueError, match="Context only requests are not supported in pytorch "
                                         "backend when overlap is enabled"):
        llm.generate_async(PROMPT, SamplingParams(end_id=-1),
                           disaggregated_params=DisaggregatedParams(request_type="context_only"))
    out = _result(llm, PROMPT, SamplingParams(max_tokens=2, end_id=-1))  # aggregated: served
    assert len(out.outputs[0].token_ids) == 2


def test_a_prompt_over_max_num_tokens_without_chunked_prefill_is_refused(make):
    """llm.py _check_arguments (PyTorch backend): the reference used to admit it."""
    llm = make(BASE)
    with pytest.raises(ValueError, match=r"prompt length \(17.0\).*should not exceed "
                                         r"max_num_tokens \(16\)"):
        llm.generate_async(list(range(5, 22)), SamplingParams(end_id=-1))
    chunked = make({**BASE, "enable_chunked_prefill": True})
    out = _result(chunked, list(range(5, 22)), SamplingParams(max_tokens=1, end_id=-1))
    assert len(out.outputs[0].token_ids) == 1


def test_max_tokens_past_max_seq_len_is_clamped_as_the_pytorch_flow_does(make, caplog):
    """executor/base_worker.py _deduce_max_tokens: a warning and what max_seq_len leaves."""
    llm = make(BASE)
    caplog.set_level(logging.WARNING, logger="pdtrt.llmapi.reference.llm")
    out = _result(llm, PROMPT, SamplingParams(max_tokens=100, end_id=-1))
    assert len(out.outputs[0].token_ids) == 32 - len(PROMPT)
    assert out.outputs[0].finish_reason == "length"
    assert "using default_max_tokens instead" in caplog.text


@pytest.mark.parametrize(("knobs", "greedy"), [
    ({}, True),  # nothing set: greedy in 1.2 (the 1.0 rule said so too)
    ({"temperature": 0.0, "top_k": 50}, True),  # temperature 0: greedy in 1.2, not in 1.0
    ({"top_p": 0.0, "temperature": 0.8}, True),
    ({"top_k": 1, "temperature": 0.8}, True),
    ({"temperature": 0.8}, False),
    ({"top_k": 50, "top_p": 0.9}, False),
])
def test_the_greedy_rule_is_1_2s(knobs, greedy):
    assert SamplingParams(end_id=1, **knobs)._greedy_decoding is greedy


@pytest.mark.parametrize("knobs", [{"n": 2}, {"use_beam_search": True}, {"min_p": 0.1},
                                   {"length_penalty": 1.2}, {"prompt_logprobs": 1}],
                         ids=["n", "beam", "min_p", "length_penalty", "prompt_logprobs"])
def test_a_field_of_the_release_the_reference_does_not_do_is_refused_not_ignored(make, knobs):
    llm = make(BASE)
    with pytest.raises(ValueError, match=f"does not implement {next(iter(knobs))}"):
        llm.generate_async(PROMPT, SamplingParams(end_id=-1, **knobs))


def test_kv_held_for_pickup_counts_against_the_pool_until_it_expires(make):
    """Upstream keeps a finished context request's blocks until its KV is pulled or its
    transfer times out (PRs #12640, #12816): a pool full of held KV queues the next prefill."""
    clock = FakeClock()
    layout = make.engine.layout
    held = FakeTransceiver(layout, hold_s=5.0, clock=clock)
    # 4 blocks of 8 tokens: one context request holds ceil(7 / 8) = 1 block once it is done,
    # and reserves ceil((7 + 1) / 8) = 1 while it runs
    llm = make({**PHASE, "kv_cache_config": {"tokens_per_block": 8, "max_tokens": 32}}, held)
    ctx = DisaggregatedParams(request_type="context_only")
    for _ in range(4):
        out = _result(llm, PROMPT, SamplingParams(end_id=-1), disaggregated_params=ctx)
        assert out.outputs[0].finish_reason == "length"
    assert len(held.held_prompt_lens()) == 4

    async def next_one():
        waiting = llm.generate_async(PROMPT, SamplingParams(end_id=-1), disaggregated_params=ctx)
        task = asyncio.ensure_future(waiting.aresult())
        await asyncio.wait({task}, timeout=0.5)
        assert not task.done() and llm._scheduler.num_queued == 1  # the pool is full: queued
        clock.advance(6.0)  # the held KV times out and its blocks go back to the pool
        return await asyncio.wait_for(task, 10)

    out = asyncio.run(next_one())
    assert out.outputs[0].finish_reason == "length"
