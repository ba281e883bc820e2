"""``decode.engine.stream_interval: 4`` on the real server: the reference deployment (same
engines) with the decode and the aggregated model answering at the first token, every 4th
iteration and the end (TensorRT-LLM's rule; pdtrt/llmapi/reference/llm.py, ``stream_due``).

Oracle: transformers' greedy ``generate()`` on the same checkpoint -- what the deployment with
the default ``stream_interval`` 1 streams, one token per response (tests/serve/test_e2e.py).
Here the same tokens must come, about a quarter as many responses: 16 tokens in 5 responses of
1, 3, 4, 4 and 4 tokens, through the disaggregated ``ensemble`` (the router relays the decode's
responses as they come), the ``ensemble_aggregated`` and the OpenAI front (one SSE chunk per
response); ``pdtrt bench`` counts every token and spreads each response's gap over its tokens.
"""

from __future__ import annotations

import pytest
from conftest import serve_edited_reference
from e2e_client import transformers_oracle

from pdtrt.client import GenerateRequest, LLMClient

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The quick brown fox jumps over the lazy dog"
N = 16
SIZES = [1, 3, 4, 4, 4]  # iterations 1, 4, 8, 12, 16
MODELS = ("ensemble", "ensemble_aggregated")


@pytest.fixture(scope="module")
def every_fourth(reference_engines, tmp_path_factory):
    """The reference deployment with ``decode.engine.stream_interval: 4``: (gRPC URL,
    Prepared)."""
    root, _dep = reference_engines
    decode = "decode:\n  gpu: cpu\n  instances: 1\n  engine:\n"
    server, prepared = serve_edited_reference(
        root, tmp_path_factory.mktemp("stream-interval"), old=decode,
        new=decode + "    stream_interval: 4\n")
    yield server.endpoints.grpc_url, prepared
    server.stop()


@pytest.fixture(scope="module")
def oracle(every_fourth):
    """(tokenizer, the greedy ids of PROMPT): 16 tokens, no end id among them."""
    tok, expected = transformers_oracle(every_fourth[1].repository)
    ids, _per_token, _full = expected(PROMPT, N)
    assert len(ids) == N, "the oracle stopped early: pick a prompt without an early end id"
    return tok, ids


def _pieces(tok, ids: list[int], sizes: list[int]) -> list[str]:
    """The text of each response: the postprocessing decodes each on its own."""
    out, at = [], 0
    for k in sizes:
        out.append(tok.decode(ids[at:at + k], skip_special_tokens=True))
        at += k
    return out


@pytest.mark.parametrize("model", MODELS)
def test_greedy_output_is_unchanged_in_a_quarter_of_the_responses(every_fourth, oracle, model):
    url, _prepared = every_fourth
    tok, ids = oracle
    with LLMClient(url) as client:
        result = client.generate(GenerateRequest(prompt=PROMPT, max_tokens=N),
                                 model=model, timeout_s=120).raise_for_error()
    assert [c.num_tokens for c in result.chunks] == SIZES  # the first token alone, as upstream
    assert [c.text for c in result.chunks] == _pieces(tok, ids, SIZES)
    assert result.text == tok.decode(ids, skip_special_tokens=True)
    assert result.num_tokens == N and len(result.itls_s) == N - 1


@pytest.mark.parametrize("model", MODELS)
def test_a_non_streaming_request_is_one_response_with_every_token(every_fourth, oracle, model):
    url, _prepared = every_fourth
    tok, ids = oracle
    with LLMClient(url) as client:
        result = client.generate(GenerateRequest(prompt=PROMPT, max_tokens=N, stream=False),
                                 model=model, timeout_s=120).raise_for_error()
    assert [(c.text, c.num_tokens) for c in result.chunks] == [
        (tok.decode(ids, skip_special_tokens=True), N)]


def test_the_openai_front_sends_one_sse_chunk_per_response(every_fourth, oracle):
    openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")
    from pdtrt.front.options import FrontOptions
    from pdtrt.front.server import FrontServer

    url, prepared = every_fourth
    tok, ids = oracle
    front = FrontServer(FrontOptions(repository=prepared.repository, grpc_url=url))
    base = front.start()
    try:
        client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
        chunks = list(client.completions.create(model="pdtrt/tiny-llama", prompt=PROMPT,
                                                max_tokens=N, temperature=0, stream=True))
        whole = client.completions.create(model="pdtrt/tiny-llama", prompt=PROMPT,
                                          max_tokens=N, temperature=0)
    finally:
        front.stop()
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    expected = tok.decode(ids, skip_special_tokens=True)
    assert "".join(texts) == whole.choices[0].text == expected
    assert whole.usage.completion_tokens == N
    # one chunk per engine response (5), less any whose text the detokenizer held back
    assert 2 <= len(texts) <= len(SIZES), texts
    assert chunks[-1].choices[0].finish_reason == "length"


def test_bench_counts_every_token_and_spreads_the_itl(every_fourth):
    from pdtrt.bench import BenchConfig, LoopKind, RequestPlan, parse_length, run_bench

    url, _prepared = every_fourth
    config = BenchConfig(loop=LoopKind.CLOSED, concurrency=2, num_requests=4,
                         workload=RequestPlan(isl=parse_length("uniform:4:16"),
                                              osl=parse_length(str(N)), seed=3))
    with LLMClient(url) as client:
        report = run_bench(client, config)
    (run,) = report.runs
    records = [r for r in run.records if not r.warmup]
    assert all(r.ok for r in records), [r.error for r in records]
    for r in records:  # an early end id may shorten a request; every token counts
        assert len(r.itls_s) == r.output_tokens - 1
        sizes = r.tokens_per_response or (1,) * len(r.token_times_s)
        assert r.output_tokens == sum(sizes) and sizes[0] == 1 and max(sizes) <= 4
    several = [r for r in records if r.output_tokens > 4]
    assert several and all(len(r.token_times_s) < r.output_tokens for r in several)
    assert run.summary.output_tokens == sum(r.output_tokens for r in records)
    assert run.summary.itl_ms.count == sum(r.output_tokens - 1 for r in records)
