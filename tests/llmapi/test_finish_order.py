"""The reference LLM ends a request as TensorRT-LLM's TorchSampler does: the end id, then the
length limit, then the stop words (pdtrt/llmapi/reference/batch_policy.py, ``_accept``).

On the tiny seeded Llama, in one process: a context LLM and a generation LLM share an
in-process stand-in for the UCX transceiver (the real transfer is tested in
test_reference_llm.py). The policy's rules on plain data are in test_batch_policy.py; here the
same cases reach the LLM API's outputs -- finish reason, stop reason, token ids, the KV offered.
"""

from __future__ import annotations

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from tests.llmapi.ctx_peer import OPTIONS
from tests.runtime.fake_transceiver import FakeTransceiver

PROMPT = [5, 60, 61, 62, 63, 64, 7]
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def llms(tiny_model):
    """(context LLM, generation LLM, their shared transceiver stand-in)."""
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    engine = ReferenceEngine(tiny_model, tokens_per_block=16)
    shared = FakeTransceiver(engine.layout)
    made = [LLM._from_engine(engine, transceiver=shared, **OPTIONS) for _ in range(2)]
    yield (*made, shared)
    for llm in made:
        llm.shutdown()


def _params(max_tokens: int, words: list[list[int]], *, keep: bool = True) -> SamplingParams:
    """Greedy, no end id; ``words`` as a tokenizer-less caller sets them (one-token words as
    ``stop_token_ids``, longer ones in ``_stop_word_ids`` named by ``stop``)."""
    long = [w for w in words if len(w) > 1]
    params = SamplingParams(max_tokens=max_tokens, end_id=-1, include_stop_str_in_output=keep,
                            stop_token_ids=[w[0] for w in words if len(w) == 1] or None,
                            stop=[f"w{i}" for i in range(len(long))] or None)
    if long:
        params._stop_word_ids = long
    return params


def _run(llm: LLM, params: SamplingParams, **kwargs):
    return llm.generate_async(PROMPT, params, **kwargs).result(timeout=TIMEOUT_S).outputs[0]


@pytest.fixture(scope="module")
def base(llms) -> list[int]:
    """The greedy output with no stop word; the tests need its first three tokens distinct."""
    out = _run(llms[0], _params(8, [])).token_ids
    assert len(set(out[:3])) == 3, out
    return out


@pytest.mark.parametrize("word", ["first-token", "prompt-tail-and-first-token"])
def test_a_context_only_request_whose_token_completes_a_stop_word_ends_length_and_offers_its_kv(
        llms, base, word):
    ctx_llm, gen_llm, shared = llms
    words = [[base[0]]] if word == "first-token" else [[PROMPT[-1], base[0]]]
    offered = shared.counts["offered"]
    out = _run(ctx_llm, _params(8, words),
               disaggregated_params=DisaggregatedParams(request_type="context_only"))
    assert (out.finish_reason, out.stop_reason, out.token_ids) == ("length", None, base[:1])
    assert out.disaggregated_params.opaque_state and shared.counts["offered"] == offered + 1
    # the aggregated request ends at the word ...
    whole = _run(ctx_llm, _params(8, words))
    assert (whole.finish_reason, whole.token_ids) == ("stop", base[:1])
    # ... while a decode of that hand-off goes past it, as upstream's generation worker does
    # (the first token is appended outside the sampler's checks): pdtrt's router sends none
    gen = DisaggregatedParams(request_type="generation_only",
                              first_gen_tokens=out.disaggregated_params.first_gen_tokens,
                              ctx_request_id=out.disaggregated_params.ctx_request_id,
                              opaque_state=out.disaggregated_params.opaque_state)
    decoded = _run(gen_llm, _params(3, words), disaggregated_params=gen)
    assert (decoded.finish_reason, decoded.token_ids) == ("length", base[:3])


@pytest.mark.parametrize("keep", [True, False], ids=["word-kept", "word-cut-if-stop"])
def test_a_stop_word_completed_by_the_last_allowed_token_ends_length_and_stays(llms, base, keep):
    """Upstream reports and cuts a stop word only when it ended the request (finish reason
    STOP_WORDS); one completed by the last allowed token ended it by length."""
    ctx_llm = llms[0]
    for words in ([[base[2]]], [[base[1], base[2]]]):
        out = _run(ctx_llm, _params(3, words, keep=keep))
        assert (out.finish_reason, out.stop_reason, out.token_ids) == ("length", None, base[:3])
        earlier = _run(ctx_llm, _params(4, words, keep=keep))  # one more allowed: "stop"
        assert (earlier.finish_reason, earlier.token_ids) == \
            ("stop", base[:3] if keep else base[:3 - len(words[0])])
