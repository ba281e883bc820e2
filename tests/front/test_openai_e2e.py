"""The OpenAI front on the real reference deployment (Triton 2.51, UCX between the phases),
driven by real clients: the ``openai`` SDK and ``curl``. Oracle: the ``ensemble`` through
tritonclient and transformers' generate() on the same checkpoint (greedy)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request

import pytest
from e2e_client import hang_up_mid_stream, metric, wait_for

from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.deploy.metrics import FRONT, family_of
from tests.serve.test_e2e import oracle  # noqa: F401 -- the module-scoped fixture, reused

pytestmark = [pytest.mark.triton, pytest.mark.slow]
openai = pytest.importorskip("openai", reason="the openai SDK is a dev dependency")

MODEL = "pdtrt/tiny-llama"
PROMPT = "The quick brown fox jumps over the lazy dog"


@pytest.fixture(scope="module")
def front(reference_server):
    from pdtrt.front.options import FrontOptions
    from pdtrt.front.server import FrontServer

    server, prepared = reference_server
    fs = FrontServer(FrontOptions(repository=prepared.repository,
                                  grpc_url=server.endpoints.grpc_url))
    url = fs.start()
    yield url
    fs.stop()


@pytest.fixture(scope="module")
def client(front):
    return openai.OpenAI(base_url=front, api_key="unused", max_retries=0, timeout=120)


def _ensemble(reference_server, prompt: str, n: int) -> str:
    with LLMClient(reference_server[0].endpoints.grpc_url) as tc:
        result = tc.generate(GenerateRequest(prompt=prompt, max_tokens=n, stream=False),
                             timeout_s=120).raise_for_error()
    return result.text


def test_completions_streamed_and_not_equal_the_ensemble_and_generate(
        reference_server, oracle, client):  # noqa: F811
    _tok, expected = oracle
    ids, _pieces, text = expected(PROMPT, 12)
    whole = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, stream=True))
    assert whole.choices[0].text == streamed == text == _ensemble(reference_server, PROMPT, 12)
    assert whole.usage.completion_tokens == len(ids) and whole.usage.prompt_tokens == len(
        _tok.encode(PROMPT))
    assert whole.choices[0].finish_reason == ("length" if len(ids) == 12 else "stop")


def test_chat_streamed_and_not_uses_the_chat_template(reference_server, oracle,  # noqa: F811
                                                      client):
    tok, expected = oracle
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.startswith(tok.bos_token)  # the template writes BOS; the ensemble adds it
    _ids, _pieces, text = expected(rendered[len(tok.bos_token):], 10)
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10,
                                           temperature=0, logprobs=True)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=messages, max_completion_tokens=10, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == streamed == text
    assert len(whole.choices[0].logprobs.content) == whole.usage.completion_tokens
    assert all(e.logprob <= 0 for e in whole.choices[0].logprobs.content)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        whole.usage.completion_tokens


def test_seeded_sampling_repeats_and_another_seed_differs(client):
    def sample(seed):
        return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16,
                                         temperature=1.0, seed=seed).choices[0].text

    assert sample(11) == sample(11)
    assert sample(11) != sample(12)


def test_errors_reach_the_sdk_as_its_exceptions(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user",
                                                                  "content": "hi"}])
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=MODEL, prompt="x " * 600, max_tokens=4)
    assert "this deployment takes at most" in str(err.value)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_reads_the_sse_stream(front):
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Hello"}],
                       "max_tokens": 5, "temperature": 0, "stream": True})
    out = subprocess.run(["curl", "-sSN", "--max-time", "60", f"{front}/chat/completions",
                          "-H", "Content-Type: application/json", "-d", body],
                         capture_output=True, text=True, timeout=90, check=True).stdout
    events = [e for e in out.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_a_client_that_hangs_up_frees_its_kv(reference_server, front):
    """A streamed chat that its client drops after a few chunks: the front stops it at the
    router (TensorRT-LLM's stop request), the decode sequence ends, no KV stays held."""
    metrics = reference_server[0].endpoints.metrics_url
    cancelled = metric(metrics, "pdtrt_router_cancelled_total")
    decode_cancelled = metric(metrics, "pdtrt_engine_cancelled_total", model="decode")
    hang_up_mid_stream(front, MODEL)
    assert wait_for(lambda: metric(metrics, "pdtrt_router_cancelled_total") == cancelled + 1)
    assert wait_for(lambda: metric(metrics, "pdtrt_engine_cancelled_total", model="decode")
                    == decode_cancelled + 1)
    assert wait_for(lambda: metric(metrics, "pdtrt_engine_active_sequences", model="decode")
                    == 0)
    assert wait_for(lambda: metric(metrics, "pdtrt_kv_held_buffers", model="prefill") == 0)


def test_each_request_lands_in_the_router_and_front_histograms(reference_server, front, client):
    """One chat through the front: one observation in each of the router's per-request
    histograms on Triton's metrics port (Prometheus histogram series of counters), and
    every token gap in the front's own ITL histogram."""
    metrics = reference_server[0].endpoints.metrics_url
    names = ("queue", "prefill", "kv_transfer", "decode", "ttft", "tpot", "e2e")
    before = {n: metric(metrics, f"pdtrt_request_{n}_seconds_count") for n in names}
    out_before = metric(metrics, "pdtrt_request_output_tokens_sum")
    front_metrics = front.removesuffix("/v1") + "/metrics"
    itl_before = metric(front_metrics, "pdtrt_front_itl_seconds_count")
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count to ten"}], max_tokens=8,
        temperature=0, extra_body={"ignore_eos": True}, stream=True)
    pieces = [c for c in reply if c.choices]
    assert pieces[-1].choices[0].finish_reason == "length"
    # the router's counters reach the metrics port within its flush interval
    assert wait_for(lambda: all(metric(metrics, f"pdtrt_request_{n}_seconds_count")
                                == before[n] + 1 for n in names), timeout_s=10), {
        n: metric(metrics, f"pdtrt_request_{n}_seconds_count") - before[n] for n in names}
    assert metric(metrics, "pdtrt_request_output_tokens_sum") == out_before + 8
    assert metric(front_metrics, "pdtrt_front_itl_seconds_count") == itl_before + 7
    # every front family the dashboard may query is on the front's scrape
    scrape = urllib.request.urlopen(front_metrics, timeout=10).read().decode()
    served = {family_of(n) for n in re.findall(r"^# TYPE (\S+) ", scrape, re.M)}
    assert FRONT <= served, FRONT - served
    # Prometheus's histogram series: the +Inf bucket holds every observation
    assert metric(metrics, "pdtrt_request_ttft_seconds_bucket", le="+Inf") == metric(
        metrics, "pdtrt_request_ttft_seconds_count")


def test_chat_top_logprobs_5_give_the_aggregated_paths_alternatives(reference_server, client):
    """``top_logprobs`` 5 through the front (the router: prefill then decode): 5 alternatives
    per token, streamed as whole, the chosen token first (greedy) -- the same tokens and
    log-probabilities as the aggregated engine model gives for the same prompt ids."""
    from pdtrt.engine_io import ModelName
    from pdtrt.front.deployment import ServedDeployment
    from pdtrt.front.text import FrontTokenizer
    from tests.serve.test_top_log_probs import run_top

    messages = [{"role": "user", "content": PROMPT}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 8, "temperature": 0,
            "logprobs": True, "top_logprobs": 5}
    whole = client.chat.completions.create(**body)
    content = whole.choices[0].logprobs.content
    streamed = [e for c in client.chat.completions.create(**body, stream=True)
                if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]

    def rows(entries):
        return [(e.token, e.logprob, [(a.token, a.logprob) for a in e.top_logprobs])
                for e in entries]

    assert len(content) == whole.usage.completion_tokens == 8
    assert rows(streamed) == rows(content)
    assert all(len(e.top_logprobs) == 5 for e in content)
    for e in content:  # greedy: the chosen token is the best
        assert (e.top_logprobs[0].token, e.top_logprobs[0].logprob) == (e.token, e.logprob)
        assert [a.logprob for a in e.top_logprobs] == sorted(
            (a.logprob for a in e.top_logprobs), reverse=True)
        assert all(a.bytes == list(a.token.encode()) for a in e.top_logprobs)

    server, prepared = reference_server
    tok = FrontTokenizer.load(ServedDeployment.from_repository(prepared.repository)
                              .tokenizer_dir)
    tokens, values, top = run_top(server.endpoints.grpc_url, ModelName.AGGREGATED, 8,
                                  "top-front-agg", prompt=tok.chat(messages))
    assert [e.token for e in content] == [tok.token_text(t) for t in tokens]
    assert [e.logprob for e in content] == pytest.approx(values, abs=1e-5)
    assert [[a.token for a in e.top_logprobs] for e in content] == [
        [tok.token_text(t) for t, _ in row] for row in top]
    assert [a.logprob for e in content for a in e.top_logprobs] == pytest.approx(
        [v for row in top for _, v in row], abs=1e-5)


def test_completions_logprobs_n_and_a_too_large_top_logprobs(client):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0,
                                    logprobs=3)
    lps = got.choices[0].logprobs
    assert len(lps.tokens) == len(lps.top_logprobs) == 4
    for token, value, alternatives in zip(lps.tokens, lps.token_logprobs, lps.top_logprobs,
                                          strict=True):
        assert 1 <= len(alternatives) <= 3 and alternatives[token] == pytest.approx(value)
    with pytest.raises(openai.BadRequestError, match="at most 20 alternatives per token"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       max_tokens=2, logprobs=True, top_logprobs=21)
