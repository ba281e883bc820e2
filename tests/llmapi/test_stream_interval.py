"""``stream_interval`` on the reference LLM: a streaming request is answered at its first token,
at every N-th iteration after, and at its end, each response carrying every token since the one
before -- TensorRT-LLM's rule (``PyExecutor._handle_responses``; cited at
:func:`pdtrt.llmapi.reference.llm.stream_due`). A generation-only request counts its imported
first token as iteration 1, as upstream's generation worker does.

The rule on plain numbers, then on the tiny seeded Llama in one process: an aggregated LLM,
and a context LLM and a generation LLM sharing an in-process stand-in for the UCX transceiver
(the real transfer is tested in test_reference_llm.py).
"""

from __future__ import annotations

import asyncio

import pytest

from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams
from pdtrt.llmapi.reference.llm import stream_due
from tests.llmapi.ctx_peer import OPTIONS
from tests.runtime.fake_transceiver import FakeTransceiver

PROMPT = [5, 60, 61, 62, 63, 64, 7]
AGGREGATED = {k: v for k, v in OPTIONS.items() if k != "cache_transceiver_config"}


@pytest.mark.parametrize(("interval", "due"), [
    (1, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
    (2, [1, 2, 4, 6, 8]),
    (4, [1, 4, 8]),
    (5, [1, 5]),
], ids=["1", "2", "4", "5"])
def test_the_rule_first_iteration_then_every_nth(interval, due):
    assert [k for k in range(1, 10) if stream_due(k, interval)] == due


@pytest.fixture(scope="module")
def llms(tiny_model):
    """{interval: (aggregated LLM, context LLM, generation LLM)} for intervals 1 and 4."""
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    engine = ReferenceEngine(tiny_model, tokens_per_block=16)
    made: dict[int, tuple[LLM, LLM, LLM]] = {}
    for interval in (1, 4):
        shared = FakeTransceiver(engine.layout)
        made[interval] = (
            LLM._from_engine(engine, **AGGREGATED, stream_interval=interval),
            LLM._from_engine(engine, transceiver=shared, **OPTIONS, stream_interval=interval),
            LLM._from_engine(engine, transceiver=shared, **OPTIONS, stream_interval=interval))
    yield made
    for trio in made.values():
        for llm in trio:
            llm.shutdown()


def _responses(llm: LLM, n: int, *, streaming: bool = True, params: SamplingParams | None = None,
               **kwargs) -> list[tuple[list[int], bool]]:
    """Each response's new tokens and whether it is the final one."""
    async def steps():
        result = llm.generate_async(PROMPT, params or SamplingParams(max_tokens=n, end_id=-1),
                                    streaming=streaming, **kwargs)
        return [(list(s.outputs[0].token_ids_diff), s.finished) async for s in result]

    return asyncio.run(steps())


def _sizes(responses: list[tuple[list[int], bool]]) -> list[int]:
    return [len(tokens) for tokens, _final in responses]


@pytest.mark.parametrize(("n", "sizes"), [
    (16, [1, 3, 4, 4, 4]),  # iterations 1, 4, 8, 12, 16 (the last also due)
    (10, [1, 3, 4, 2]),  # 1, 4, 8, then the end at 10
    (1, [1]),
    (4, [1, 3]),
], ids=["16-tokens", "10-tokens", "1-token", "4-tokens"])
def test_aggregated_responses_follow_the_rule_and_the_tokens_do_not_change(llms, n, sizes):
    four = _responses(llms[4][0], n)
    one = _responses(llms[1][0], n)
    assert _sizes(one) == [1] * n
    assert _sizes(four) == sizes and four[-1][1] and not any(f for _t, f in four[:-1])
    assert [t for tokens, _f in four for t in tokens] == [t for tokens, _f in one for t in tokens]


def test_a_request_that_ends_early_gets_its_last_tokens_at_once(llms):
    """The end id at iteration 6: a final response with iterations 5 and 6's tokens (the end
    id itself is not output), not a wait for iteration 8."""
    base = [t for tokens, _f in _responses(llms[1][0], 12) for t in tokens]
    end = base[5]
    assert end not in base[:5], base  # the end id must first come at iteration 6
    got = _responses(llms[4][0], 12, params=SamplingParams(max_tokens=12, end_id=end))
    assert [tokens for tokens, _f in got] == [base[:1], base[1:4], base[4:5]]
    assert got[-1][1]


def test_a_non_streaming_request_gets_one_response_whatever_the_interval(llms):
    got = _responses(llms[4][0], 10, streaming=False)
    assert _sizes(got) == [10] and got[0][1]


def test_generation_only_counts_its_imported_first_token_as_iteration_one(llms):
    """Upstream sets py_decoding_iter to 1 when the first token is appended: the generation
    worker answers with it at once, then at iterations 4, 8, ... -- the same cadence as an
    aggregated request, the same tokens."""
    _agg, ctx, gen = llms[4]
    first = asyncio.run(ctx.generate_async(
        PROMPT, SamplingParams(max_tokens=16, end_id=-1),
        disaggregated_params=DisaggregatedParams(request_type="context_only")).aresult())
    handed = first.outputs[0].disaggregated_params
    got = _responses(gen, 16, disaggregated_params=DisaggregatedParams(
        request_type="generation_only", first_gen_tokens=handed.first_gen_tokens,
        ctx_request_id=handed.ctx_request_id, opaque_state=handed.opaque_state))
    assert _sizes(got) == [1, 3, 4, 4, 4]
    assert got[0][0] == handed.first_gen_tokens
    whole = [t for tokens, _f in _responses(llms[1][0], 16) for t in tokens]
    assert [t for tokens, _f in got for t in tokens] == whole


def test_a_context_only_request_is_answered_once_with_its_one_token(llms):
    _agg, ctx, _gen = llms[4]
    got = _responses(ctx, 16, disaggregated_params=DisaggregatedParams(
        request_type="context_only"))
    assert _sizes(got) == [1] and got[0][1]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4"], ids=["zero", "negative", "float", "string"])
def test_a_bad_interval_is_refused_like_llmargs(tiny_model, bad):
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    with pytest.raises(ValueError, match="LLM option 'stream_interval'"):
        LLM._from_engine(ReferenceEngine(tiny_model, tokens_per_block=16), **AGGREGATED,
                         stream_interval=bad)
