"""The reference LLM API on the tiny seeded Llama: greedy output equal to transformers'
``generate()``, aggregated and disaggregated (context_only in another process, the KV pulled
over real UCX on this host, generation_only here), abort, and options refused like LlmArgs."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from tests.llmapi.ctx_peer import OPTIONS
from tests.llmapi.twin_surfaces import DisaggregatedParams13, DisaggregatedParamsWithLogprobs
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
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2, length_penalty=1.3)},
     "the reference LLM does not implement length_penalty"),
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2, logprobs=100_000)},
     "logprobs (100000) must be in 0..512 (the vocabulary)"),
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2, n=2)},
     "the reference LLM does not implement n (2)"),
    ({"sampling_params": SamplingParams(max_tokens=4, end_id=2),
      "disaggregated_params": DisaggregatedParams(request_type="context_only")},
     "context_only requests need cache_transceiver_config"),
], ids=["no-end-id", "beam-search-penalty", "top-logprobs-past-the-vocabulary", "several-returns",
        "no-transceiver"])
def test_what_the_engine_cannot_serve_is_refused_at_once(llm, kwargs, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")):
        llm.generate_async(PROMPT, **kwargs)


def test_request_type_is_checked_like_upstream():
    assert DisaggregatedParams(request_type="Context_Only").request_type == "context_only"
    with pytest.raises(ValueError, match="Unknown request type: prefill"):
        DisaggregatedParams(request_type="prefill")


@pytest.fixture(scope="module")
def context_peer(tiny_model_dir):
    from tests.llmapi.ctx_peer import running_context_peer

    with running_context_peer(str(tiny_model_dir)) as call:
        yield call


@pytest.fixture(scope="module")
def generation_llm(tiny_model_dir):
    """The generation-only LLM of this process: one for the module, as the UCX context of a
    process works on the first node's event loop only (a second LLM's pulls time out)."""
    made = LLM(str(tiny_model_dir), skip_tokenizer_init=True, **OPTIONS)
    yield made
    made.shutdown()


@needs_ucx
def test_context_then_generation_over_ucx_equals_aggregated(context_peer, generation_llm, llm,
                                                           tiny_model):
    ctx = context_peer("context", PROMPT)
    assert ctx["token_ids"] == ctx["first_gen_tokens"] and len(ctx["first_gen_tokens"]) == 1
    assert context_peer("stats")["held"] == 1
    gen = generation_llm
    before = gen._pdtrt_kv_transfer_stats()["pulled"]
    params = DisaggregatedParams(request_type="generation_only",
                                 first_gen_tokens=ctx["first_gen_tokens"],
                                 ctx_request_id=ctx["ctx_request_id"],
                                 opaque_state=ctx["opaque_state"])
    result = run(generate(gen, PROMPT, 10, disaggregated_params=params))
    # the KV has been pulled: a second pull finds nothing
    with pytest.raises(RuntimeError, match="KV transfer failed: the prefill instance no "
                                           "longer holds"):
        run(generate(gen, PROMPT, 10, disaggregated_params=params))
    stats = gen._pdtrt_kv_transfer_stats()
    assert result.outputs[0].token_ids == run(generate(llm, PROMPT, 10)).outputs[0].token_ids \
        == hf_greedy(tiny_model, PROMPT, 10)
    assert stats["pulled"] == before + 1 and stats["pulled_bytes"] > 0
    assert context_peer("stats")["held"] == 0


# The tests that pull over UCX into generation_llm come before any test that makes another UCX
# node in this process: after one is made and shut down, generation_llm's pulls time out
# (ucxx's one context per process).
FEATURES = {
    "stop-word-across-the-phases": {"stop": ["w"], "include_stop_str_in_output": True},
    "penalties-min-tokens-bad-words-log-probs": {
        "repetition_penalty": 1.3, "presence_penalty": 0.5, "frequency_penalty": 0.4,
        "min_tokens": 5, "logprobs": 1},
    "seeded-sampling-with-log-probs": {"temperature": 0.9, "top_k": 50, "seed": 7,
                                       "logprobs": 1},
    "top-5-log-probs": {"temperature": 0.9, "top_k": 50, "seed": 3, "logprobs": 5},
}


@needs_ucx
@pytest.mark.parametrize("feature", list(FEATURES))
def test_each_sampling_feature_gives_the_same_output_split_across_two_engines(
        feature, context_peer, generation_llm, llm):
    base = run(generate(llm, PROMPT, 10)).outputs[0].token_ids
    sampling = dict(FEATURES[feature])
    if feature.startswith("stop-word"):  # the first token (context) and the next (decode)
        sampling["_stop_word_ids"] = [base[:2]]
    if feature.startswith("penalties"):
        sampling["end_id"] = base[1]  # held off by min_tokens
        sampling.update(bad_token_ids=[base[3]], bad=["b"], _bad_word_ids=[[base[0], base[5]]])
    aggregated = run(submit(llm, PROMPT, _params(max_tokens=10, **{"end_id": -1, **sampling})))
    ctx = context_peer("context", (PROMPT, {**{"end_id": -1}, **sampling}))
    assert ctx["finish_reason"] == "length"
    # a release with the cherry-picked first_gen_log_probs: the log-probs cross the phases whole
    params = DisaggregatedParamsWithLogprobs(request_type="generation_only",
                                             first_gen_tokens=ctx["first_gen_tokens"],
                                             ctx_request_id=ctx["ctx_request_id"],
                                             opaque_state=ctx["opaque_state"],
                                             first_gen_log_probs=ctx["logprobs"] or None)
    split = run(submit(generation_llm, PROMPT,
                       _params(max_tokens=10, **{"end_id": -1, **sampling}),
                       disaggregated_params=params))
    want, got = aggregated.outputs[0], split.outputs[0]
    assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
    assert got.token_ids != base or feature.startswith("stop-word")  # the feature acted
    if sampling.get("logprobs"):
        assert [d[t].logprob for t, d in zip(got.token_ids, got.logprobs, strict=True)] == \
            pytest.approx([d[t].logprob for t, d in zip(want.token_ids, want.logprobs,
                                                        strict=True)], abs=1e-5)
        # the whole entries alike: the top-k ranked 1..k (and the chosen token where it is
        # outside them), the same tokens on both sides
        assert [list(d) for d in got.logprobs] == [list(d) for d in want.logprobs]
        k = sampling["logprobs"]
        assert all(sorted(e.rank for e in d.values())[:k] == list(range(1, k + 1))
                   and len(d) in (k, k + 1) for d in got.logprobs)
    if feature.startswith("stop-word"):
        assert got.token_ids == base[:2] and got.finish_reason == "stop"


@needs_ucx
def test_without_first_gen_log_probs_a_generation_request_has_none_for_its_first_tokens(
        context_peer, generation_llm):
    """The pinned class (release/1.2 as cut) cannot carry the first token's log-probability:
    the generation side reports only the tokens it sampled, so its list is shorter at the front
    (the engine model fills the first ones from context_phase_params)."""
    ctx = context_peer("context", (PROMPT, {"logprobs": 1}))
    params = DisaggregatedParams(request_type="generation_only",
                                 first_gen_tokens=ctx["first_gen_tokens"],
                                 ctx_request_id=ctx["ctx_request_id"],
                                 opaque_state=ctx["opaque_state"])
    out = run(submit(generation_llm, PROMPT, _params(max_tokens=4, end_id=-1, logprobs=1),
                     disaggregated_params=params)).outputs[0]
    assert len(out.token_ids) == 4 and len(out.logprobs) == 3
    assert [t for d in out.logprobs for t in d] == out.token_ids[1:]


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
    DisaggregatedParams(request_type="context_only", multimodal_hashes=[[1] * 8]),
    DisaggregatedParams13(request_type="context_only", ctx_dp_rank=1),
    DisaggregatedParams13(request_type="context_only", schedule_style=1),
], ids=["draft-tokens", "multimodal", "attention-dp-1.3", "generation-first-1.3"])
def test_disaggregated_params_the_reference_cannot_honour_are_refused(llm, params):
    with pytest.raises(ValueError, match="does not implement DisaggregatedParams"):
        llm.generate_async(PROMPT, SamplingParams(max_tokens=1, end_id=-1),
                           disaggregated_params=params)


# -- sampling features: TensorRT-LLM's rules, checked against transformers ---------------------
def _params(**kwargs) -> SamplingParams:
    """SamplingParams with the init=False word-id fields set the way a caller without a
    tokenizer sets them (after construction)."""
    ids = {n: kwargs.pop(n) for n in ("_stop_word_ids", "_bad_word_ids") if n in kwargs}
    params = SamplingParams(**kwargs)
    for name, value in ids.items():
        setattr(params, name, value)
    return params


def test_penalties_min_tokens_bad_words_and_log_probs_equal_transformers(llm, tiny_model):
    import torch

    plain = run(submit(llm, PROMPT, _params(max_tokens=12, end_id=-1, repetition_penalty=1.5)))
    base = plain.outputs[0].token_ids
    eos = base[2]  # ends the output at its third token, unless min_tokens holds it off
    bad = [[base[4]], [base[0], base[1]]]  # one token, and base[1] right after base[0]
    twin = run(submit(llm, PROMPT, _params(
        max_tokens=12, end_id=eos, repetition_penalty=1.5, min_tokens=6, logprobs=True,
        bad_token_ids=[base[4]], bad=["ids"], _bad_word_ids=[bad[1]]))).outputs[0]
    hf = tiny_model.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False,
                             repetition_penalty=1.5, min_new_tokens=6, bad_words_ids=bad,
                             eos_token_id=eos, pad_token_id=0, output_scores=True,
                             return_dict_in_generate=True)
    hf_tokens = hf.sequences[0, len(PROMPT):].tolist()
    if eos in hf_tokens:  # the end id ends the output and is not part of it
        hf_tokens = hf_tokens[:hf_tokens.index(eos)]
    assert twin.token_ids == hf_tokens and len(twin.token_ids) >= 6
    assert base[4] not in twin.token_ids and twin.token_ids != base  # the rules changed it
    hf_logprobs = [float(torch.log_softmax(hf.scores[i][0], -1)[t])
                   for i, t in enumerate(twin.token_ids)]
    got = [d[t].logprob for t, d in zip(twin.token_ids, twin.logprobs, strict=True)]
    assert got == pytest.approx(hf_logprobs, abs=1e-4)
    assert twin.cumulative_logprob == pytest.approx(sum(hf_logprobs), abs=1e-3)


def test_top_5_log_probabilities_equal_transformers_top_5(llm, tiny_model):
    """``logprobs`` 5: each token's entry is transformers' five best of the log-softmax, in
    order, ranked 1..5 (greedy: the chosen token is rank 1)."""
    import torch

    twin = run(submit(llm, PROMPT, _params(max_tokens=8, end_id=-1, logprobs=5))).outputs[0]
    hf = tiny_model.generate(torch.tensor([PROMPT]), max_new_tokens=8, do_sample=False,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    assert twin.token_ids == hf.sequences[0, len(PROMPT):].tolist()
    for step, entry in enumerate(twin.logprobs):
        values, ids = torch.topk(torch.log_softmax(hf.scores[step][0], -1), 5)
        assert list(entry) == ids.tolist() and [e.rank for e in entry.values()] == [1, 2, 3, 4, 5]
        assert [e.logprob for e in entry.values()] == pytest.approx(values.tolist(), abs=1e-4)


def test_a_stop_word_ends_the_output_and_is_cut_unless_asked_to_keep_it(llm):
    base = run(generate(llm, PROMPT, 10)).outputs[0].token_ids
    word = base[3:5]
    cut = run(submit(llm, PROMPT, _params(max_tokens=10, end_id=-1, stop=["w"],
                                          _stop_word_ids=[word]))).outputs[0]
    kept = run(submit(llm, PROMPT, _params(max_tokens=10, end_id=-1, stop=["w"],
                                           _stop_word_ids=[word],
                                           include_stop_str_in_output=True))).outputs[0]
    one = run(submit(llm, PROMPT, _params(max_tokens=10, end_id=-1,
                                          stop_token_ids=[base[2]]))).outputs[0]
    assert (cut.finish_reason, cut.stop_reason, cut.token_ids) == ("stop", "w", base[:3])
    assert (kept.finish_reason, kept.token_ids) == ("stop", base[:5])
    assert (one.finish_reason, one.stop_reason, one.token_ids) == ("stop", base[2], base[:2])
    # a word that began in the prompt stops the output too, but is not the output's to cut
    spanning = run(submit(llm, PROMPT, _params(max_tokens=10, end_id=-1, stop=["p"],
                                               _stop_word_ids=[[PROMPT[-1], base[0]]])))
    out = spanning.outputs[0]
    assert (out.finish_reason, out.stop_reason, out.token_ids) == ("stop", None, base[:1])
    with pytest.raises(RuntimeError, match="not processed by tokenizer"):
        llm.generate_async(PROMPT, SamplingParams(max_tokens=2, end_id=-1, stop="x"))


def test_perf_metrics_come_on_the_final_output_only_when_asked(llm):
    plain = run(generate(llm, PROMPT, 3))
    assert plain.outputs[0].request_perf_metrics is None
    asked = run(submit(llm, PROMPT, SamplingParams(max_tokens=3, end_id=-1,
                                                   return_perf_metrics=True)))
    t = asked.outputs[0].request_perf_metrics.timing_metrics
    # steady-clock timedeltas, as upstream's pybind11 hands them over; no KV moved here
    assert timedelta(0) < t.arrival_time <= t.first_token_time <= t.last_token_time
    assert t.first_scheduled_time == timedelta(0)  # not known to the twin: unset, as upstream
    assert t.kv_cache_size == 0 and t.kv_cache_transfer_start == timedelta(0)
