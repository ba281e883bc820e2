"""The reference deployment on the real Triton server, through tritonclient gRPC streaming.

Oracle: greedy disaggregated output == aggregated output == transformers generate() on the same
checkpoint, token by token (each streamed response carries one token).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import numpy as np
import pytest
from e2e_client import (
    cancel_mid_prefill,
    engine_inputs,
    ensemble_inputs,
    generate,
    metric,
    sampling_inputs,
    transformers_oracle,
    wait_for,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy dog",
           "In a hole in the ground there lived a hobbit. " * 6]


@pytest.fixture(scope="module")
def oracle(reference_server):
    """(tokenizer, expected(prompt, n) -> per-token texts and full text) from transformers."""
    return transformers_oracle(reference_server[1].repository)


def _url(reference_server) -> str:
    return reference_server[0].endpoints.grpc_url


def _metric(reference_server, name: str, **labels: str) -> float:
    return metric(reference_server[0].endpoints.metrics_url, name, **labels)


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "medium", "long"])
@pytest.mark.parametrize("model", ["ensemble", "ensemble_aggregated"])
def test_streaming_equals_generate(reference_server, oracle, model, prompt):
    _tok, expected = oracle
    ids, per_token, _ = expected(prompt, 16)
    got = generate(_url(reference_server), model, ensemble_inputs(prompt, 16))
    assert got.error is None and got.final_seen
    assert got.texts == per_token  # one token per response, none missing or repeated
    assert len(got.texts) == len(ids)


@pytest.mark.parametrize("model", ["ensemble", "ensemble_aggregated"])
def test_non_streaming_equals_generate(reference_server, oracle, model):
    _tok, expected = oracle
    for prompt in PROMPTS:
        _ids, _per_token, full = expected(prompt, 12)
        got = generate(_url(reference_server), model, ensemble_inputs(prompt, 12, stream=False))
        assert got.error is None and got.final_seen
        assert got.texts == [full]


def test_first_token_comes_from_prefill_at_once(reference_server, oracle):
    before = _metric(reference_server, "pdtrt_kv_transfers_total", model="decode")
    got = generate(_url(reference_server), "ensemble", ensemble_inputs(PROMPTS[1], 8))
    assert got.error is None and len(got.texts) >= 2
    # The KV moved from prefill to decode over UCX for this request.
    assert _metric(reference_server, "pdtrt_kv_transfers_total", model="decode") == before + 1
    assert _metric(reference_server, "pdtrt_kv_transfer_bytes_total", model="decode") > 0
    # the router's counters reach the endpoint within its METRICS_FLUSH_S
    assert wait_for(lambda: _metric(reference_server, "pdtrt_router_ttft_seconds_total") > 0)


def test_32_concurrent_streams_each_get_their_own_tokens(reference_server, oracle):
    _tok, expected = oracle
    prompts = [f"Request number {i} asks about item {i * 7}" for i in range(32)]
    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = generate(_url(reference_server), "ensemble", ensemble_inputs(prompts[i], 8),
                              request_id=f"c{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i, prompt in enumerate(prompts):
        assert results[i].error is None and results[i].final_seen
        assert results[i].texts == expected(prompt, 8)[1]


@pytest.mark.parametrize(
    ("text", "max_tokens", "message"),
    [("", 8, "empty"),
     ("Hello", 100000, "exceeds max_seq_len"),
     ("word " * 500, 4, "this engine takes 1..384")],
    ids=["empty-prompt", "too-many-tokens", "prompt-too-long"])
@pytest.mark.parametrize("model", ["ensemble", "ensemble_aggregated"])
def test_bad_requests_are_clear_errors_and_the_server_keeps_serving(reference_server, model, text,
                                                                    max_tokens, message):
    got = generate(_url(reference_server), model, ensemble_inputs(text, max_tokens))
    assert got.error is not None and message in got.error
    ok = generate(_url(reference_server), model, ensemble_inputs("Hello again", 4))
    assert ok.error is None and ok.final_seen and len(ok.texts) >= 1


def test_kv_that_is_gone_is_a_request_error_not_a_hang(reference_server):
    import tritonclient.grpc as grpcclient

    url = _url(reference_server)
    ids = [1, 40, 41, 42, 43]
    ctx = generate(url, "prefill", engine_inputs(ids, 4),
                   parameters={"request_type": "context_only"}, output="context_phase_params")
    assert ctx.error is None and len(ctx.texts) == 1
    params = ctx.texts[0].reshape(1, -1).astype(np.uint8)
    cpp = grpcclient.InferInput("context_phase_params", list(params.shape), "UINT8")
    cpp.set_data_from_numpy(params)
    first = generate(url, "decode", engine_inputs(ids, 4, [cpp]),
                     parameters={"request_type": "generation_only"}, output="output_ids")
    assert first.error is None and first.final_seen
    again = generate(url, "decode", engine_inputs(ids, 4, [cpp]),
                     parameters={"request_type": "generation_only"}, output="output_ids",
                     timeout_s=60)
    assert again.error is not None and "no longer holds" in again.error
    bad = grpcclient.InferInput("context_phase_params", [1, 3], "UINT8")
    bad.set_data_from_numpy(np.array([[1, 2, 3]], dtype=np.uint8))
    garbage = generate(url, "decode", engine_inputs(ids, 4, [bad]),
                       parameters={"request_type": "generation_only"}, output="output_ids")
    assert garbage.error is not None and "malformed context_phase_params" in garbage.error


def test_metrics_endpoint_has_pdtrt_metrics(reference_server):
    text = urllib.request.urlopen(reference_server[0].endpoints.metrics_url).read().decode()
    for name in ("pdtrt_router_requests_total", "pdtrt_kv_transfer_seconds_total",
                 "pdtrt_prefill_queue_seconds_total", "pdtrt_decode_queue_seconds_total"):
        assert re.search(rf"^{name}\{{", text, re.M), name


def test_cancelling_a_router_stream_stops_the_decode_and_frees_its_kv(reference_server, oracle):
    """A client stops its stream after 3 tokens of 200: the router sees the cancellation, stops
    the decode sequence (TensorRT-LLM's stop request) and nothing stays held on either side."""
    import tritonclient.grpc as grpcclient

    tok, _expected = oracle
    ids = tok.encode(PROMPTS[1])
    no_eos = grpcclient.InferInput("end_id", [1, 1], "INT32")
    no_eos.set_data_from_numpy(np.array([[-1]], dtype=np.int32))
    router_before = _metric(reference_server, "pdtrt_router_cancelled_total")
    decode_before = _metric(reference_server, "pdtrt_engine_cancelled_total", model="decode")
    got = generate(_url(reference_server), "router", engine_inputs(ids, 200, [no_eos]),
                   request_id="cancel-me", output="output_ids", cancel_after=3)
    assert got.error is None and len(got.texts) == 3 and not got.final_seen
    assert wait_for(lambda: _metric(reference_server, "pdtrt_router_cancelled_total")
                     == router_before + 1)
    assert wait_for(lambda: _metric(reference_server, "pdtrt_engine_cancelled_total",
                                     model="decode") == decode_before + 1)
    assert wait_for(lambda: _metric(reference_server, "pdtrt_engine_active_sequences",
                                     model="decode") == 0)
    # the engine model refreshes its KV gauges every half second (pdtrt.runtime.engine.model._poll)
    assert wait_for(lambda: _metric(reference_server, "pdtrt_kv_held_buffers",
                                    model="prefill") == 0)
    ok = generate(_url(reference_server), "ensemble", ensemble_inputs("Hello again", 4))
    assert ok.error is None and ok.final_seen


def _held_kv_timeout_s(reference_server) -> float:
    _server, prepared = reference_server
    return float(prepared.spec.kv_transfer.timeout_s)


def test_a_stop_request_frees_no_held_kv_it_goes_at_the_transfer_timeout(reference_server):
    """TensorRT-LLM's stop contract on the prefill model, as 1.2 has it: a stop for a
    context-only request that has finished is ignored (upstream's abort skips finished
    requests), so its KV stays held until kv_transfer.timeout_s and is gone then."""
    import tritonclient.grpc as grpcclient

    url = _url(reference_server)
    timeout_s = _held_kv_timeout_s(reference_server)
    ids = [1, 50, 51, 52]
    ctx = generate(url, "prefill", engine_inputs(ids, 4), request_id="held-1",
                   parameters={"request_type": "context_only"}, output="context_phase_params")
    assert ctx.error is None
    offered_s = time.monotonic()
    held = _metric(reference_server, "pdtrt_kv_held_buffers", model="prefill")
    assert held >= 1
    stop = grpcclient.InferInput("stop", [1, 1], "BOOL")
    stop.set_data_from_numpy(np.array([[True]]))
    done = generate(url, "prefill", engine_inputs(ids, 4, [stop]), request_id="held-1",
                    output="output_ids")
    assert done.error is None and done.final_seen and done.texts == []
    assert _metric(reference_server, "pdtrt_kv_held_buffers", model="prefill") >= 1
    # gone within the timeout (+ the engine model's half-second metric refresh)
    assert wait_for(lambda: _metric(reference_server, "pdtrt_kv_held_buffers",
                                    model="prefill") == 0, timeout_s=timeout_s + 2)
    assert time.monotonic() - offered_s >= timeout_s - 0.5
    params = ctx.texts[0].reshape(1, -1).astype(np.uint8)
    cpp = grpcclient.InferInput("context_phase_params", list(params.shape), "UINT8")
    cpp.set_data_from_numpy(params)
    late = generate(url, "decode", engine_inputs(ids, 4, [cpp]),
                    parameters={"request_type": "generation_only"}, output="output_ids")
    assert late.error is not None and "no longer holds" in late.error
    anonymous = generate(url, "prefill", engine_inputs(ids, 4, [stop]), request_id="",
                         output="output_ids")
    assert anonymous.error is not None and "request id" in anonymous.error


def test_fifty_streams_cancelled_mid_prefill_leave_no_kv_held_after_the_timeout(reference_server):
    """Clients that go while their prefill runs: the router stops the prefill (a running
    sequence is stopped) or, once it has finished, leaves its KV to kv_transfer.timeout_s --
    either way the prefill's held-KV gauge is back to 0 within the timeout + 1 s (+ the
    engine model's half-second metric refresh), and the server serves the next request."""
    url = _url(reference_server)
    timeout_s = _held_kv_timeout_s(reference_server)
    cancel_mid_prefill(url, "mid-prefill")
    cancelled_s = time.monotonic()
    # every request has ended at the router (its prefill stopped, or finished with its KV
    # held and no decode sent) ...
    most_held = [0.0]

    def router_done() -> bool:
        most_held[0] = max(most_held[0], _metric(reference_server, "pdtrt_kv_held_buffers",
                                                 model="prefill"))
        return _metric(reference_server, "pdtrt_router_requests_in_flight") == 0

    assert wait_for(router_done, timeout_s=120)
    ended_s = time.monotonic()
    assert most_held[0] > 0, "no prefill held KV: the streams were not cancelled mid-prefill"
    # ... and what the prefills hold is gone within the timeout + 1 s (+ the half-second refresh)
    assert wait_for(lambda: _metric(reference_server, "pdtrt_kv_held_buffers",
                                    model="prefill") == 0, timeout_s=timeout_s + 1.5)
    print(f"router done {ended_s - cancelled_s:.1f} s after the cancel, {most_held[0]:g} KV "
          f"held at most, gone {time.monotonic() - ended_s:.1f} s later (timeout {timeout_s:g} s)")
    ok = generate(url, "ensemble", ensemble_inputs("Hello again", 4))
    assert ok.error is None and ok.final_seen


def test_rounds_of_cancelled_streams_never_wedge_the_router(reference_server):
    """The pattern that hung CI while the router called its phases over BLS: Triton's stub
    deadlocks (docs/design/serve.md, "The BLS deadlock"; on this machine the BLS router wedged in
    round 17, 13 and 73 of these rounds, the gRPC one ran 150 clean). Each round's requests
    all end at the router within seconds, and the server serves the next request."""
    url = _url(reference_server)
    for r in range(20):
        cancel_mid_prefill(url, f"wedge-{r}")
        assert wait_for(lambda: _metric(reference_server,
                                        "pdtrt_router_requests_in_flight") == 0, timeout_s=15), (
            f"round {r}: the router still has requests in flight 15 s after their cancel "
            "(wedged? benchmarks/router_wedge.py reads the stub's stacks)")
    ok = generate(url, "ensemble", ensemble_inputs("Hello again", 4), timeout_s=30)
    assert ok.error is None and ok.final_seen


# -- every sampling input of NVIDIA's ensemble, end to end ----------------------------------------
def _both_ensembles(url: str, prompt: str, n: int, **values) -> dict[str, tuple[list, list]]:
    """Per model: the streamed texts, and the log-probabilities of every token (when asked)."""
    got = {}
    for model in ("ensemble", "ensemble_aggregated"):
        inputs = ensemble_inputs(prompt, n) + sampling_inputs(**values)
        texts = generate(url, model, inputs)
        assert texts.error is None and texts.final_seen, texts.error
        logprobs = []
        if values.get("return_log_probs"):
            arrays = generate(url, model, ensemble_inputs(prompt, n) + sampling_inputs(**values),
                              output="output_log_probs")
            assert arrays.error is None, arrays.error
            logprobs = [float(v) for a in arrays.texts for v in a.reshape(-1)]
            assert len(logprobs) == len(texts.texts) and all(v <= 0 for v in logprobs)
        got[model] = (texts.texts, logprobs)
    return got


def _word(tok, ids: list[int]) -> str | None:
    """The text of ``ids`` when the preprocessing encodes it back to exactly those ids (a stop
    word that means them), else None."""
    text = tok.decode(ids)
    return text if tok.encode(text, add_special_tokens=False) == ids else None


def test_every_sampling_input_gives_the_same_output_through_both_ensembles(reference_server,
                                                                           oracle):
    tok, expected = oracle
    url, prompt = _url(reference_server), PROMPTS[1]
    ids, per_token, _ = expected(prompt, 16)

    def word_at(i: int, n: int) -> str | None:  # the text of ids[i:i+n], if it encodes back
        return _word(tok, ids[i:i + n])

    # a two-token stop word, as early as the tokenizer allows (ideally the prefill's first
    # token and the decode's first; the twin's tests pin that case on token ids)
    start, stop = next((i, w) for i in range(12) if (w := word_at(i, 2)))
    stopped = _both_ensembles(url, prompt, 16, stop_words=[stop])
    assert stopped["ensemble"] == stopped["ensemble_aggregated"]
    assert stopped["ensemble"][0] == per_token[:start + 2]  # stopped there, the word kept

    bad = next(w for i in range(1, 12) if (w := word_at(i, 1)))
    shaped = _both_ensembles(url, prompt, 16, repetition_penalty=1.4, presence_penalty=0.5,
                             frequency_penalty=0.3, min_length=10, bad_words=[bad],
                             return_log_probs=True)
    (texts, logprobs), (agg_texts, agg_logprobs) = shaped.values()
    assert texts == agg_texts and texts != per_token  # the rules acted, the same on both paths
    assert bad not in texts
    assert logprobs == pytest.approx(agg_logprobs, abs=1e-4)

    seeded = _both_ensembles(url, prompt, 16, temperature=0.9, top_k=50, random_seed=11,
                             return_log_probs=True)
    (texts, logprobs), (agg_texts, agg_logprobs) = seeded.values()
    assert texts == agg_texts and logprobs == pytest.approx(agg_logprobs, abs=1e-4)
    again = _both_ensembles(url, prompt, 16, temperature=0.9, top_k=50, random_seed=12)
    assert again["ensemble"][0] != texts  # another seed draws another output


def test_nvidias_current_names_min_tokens_and_seed_give_what_the_older_ones_give(
        reference_server):
    """TensorRT-LLM's ensemble now says min_tokens / seed (issue 48): either name works, the
    same on both paths; both at once is refused naming both, and the server keeps serving."""
    url, prompt = _url(reference_server), PROMPTS[1]
    sampled = {"temperature": 0.9, "top_k": 50, "return_log_probs": True}
    older = _both_ensembles(url, prompt, 16, min_length=10, random_seed=11, **sampled)
    current = _both_ensembles(url, prompt, 16, min_tokens=10, seed=11, **sampled)
    for model in ("ensemble", "ensemble_aggregated"):
        assert current[model][0] == older[model][0]
        assert current[model][1] == pytest.approx(older[model][1], abs=1e-4)
    for model in ("ensemble", "ensemble_aggregated"):
        both = generate(url, model, ensemble_inputs(prompt, 4) + sampling_inputs(
            random_seed=11, seed=11))
        assert both.error is not None and "inputs 'random_seed' and 'seed' are both given" \
            in both.error, both.error
    ok = generate(url, "ensemble", ensemble_inputs("Hello again", 4))
    assert ok.error is None and ok.final_seen


def test_nvidias_token_counts_come_back_on_both_paths_when_asked(reference_server, oracle):
    """return_num_input_tokens / return_num_output_tokens (issue 48): the prompt's tokens on
    every response, each response's tokens summing to the generated ones; unasked, zeros."""
    tok, expected = oracle
    url, prompt = _url(reference_server), PROMPTS[1]
    ids, _, _ = expected(prompt, 12)
    asked = {"return_num_input_tokens": True, "return_num_output_tokens": True}
    for model in ("ensemble", "ensemble_aggregated"):
        counts = {}
        for output in ("num_input_tokens", "num_output_tokens"):
            got = generate(url, model, ensemble_inputs(prompt, 12) + sampling_inputs(**asked),
                           output=output)
            assert got.error is None and got.final_seen, got.error
            counts[output] = [int(v.reshape(-1)[0]) for v in got.texts]
        assert set(counts["num_input_tokens"]) == {len(tok.encode(prompt))}, model
        assert sum(counts["num_output_tokens"]) == len(ids), model
        assert len(counts["num_output_tokens"]) == len(ids)  # one token per streamed response
        unasked = generate(url, model, ensemble_inputs(prompt, 4), output="num_input_tokens")
        assert unasked.error is None and unasked.texts
        # unasked, a placeholder zero: every ensemble response carries every declared output
        # (ensemble.PASSED_OUTPUTS), so clients that read them all (perf_analyzer) read zeros
        assert [int(v.reshape(-1)[0]) for v in unasked.texts] == [0] * len(unasked.texts), model


# -- stop words at the edges of the phases (issue 41) -------------------------------------------
def test_a_stop_word_the_prefills_first_token_completes_ends_both_paths_there(reference_server,
                                                                               oracle):
    """The prefill ends "length" and offers its KV (TensorRT-LLM checks the length before the
    stop words), and a decode would go past the word; the router ends the request after the
    prefill, as the aggregated path ends it (docs/design/serve.md). Words of one token (the first)
    and of two (the prompt's last token, then the first)."""
    tok, expected = oracle
    url = _url(reference_server)
    checked = []
    for prompt in PROMPTS:
        ids, per_token, _ = expected(prompt, 8)
        for word in (_word(tok, ids[:1]), _word(tok, tok.encode(prompt)[-1:] + ids[:1])):
            if word is None:  # the token's text does not encode back to it alone
                continue
            got = _both_ensembles(url, prompt, 8, stop_words=[word])
            assert got["ensemble"] == got["ensemble_aggregated"], (prompt, word, got)
            assert got["ensemble"][0] == per_token[:1], (prompt, word)
            checked.append(word)
    assert len(checked) >= 2, checked  # the seeded model gives such words (both kinds)


def test_a_stop_word_the_last_allowed_token_completes_gives_both_paths_the_same_output(
        reference_server, oracle):
    """Ends "length" upstream (the length is checked first), the word in the output; with
    max_tokens 1 the prefill's token is that last one, with more a decode's."""
    tok, expected = oracle
    url, prompt = _url(reference_server), PROMPTS[0]
    ids, per_token, _ = expected(prompt, 8)
    last = next((i + 1, w) for i in range(1, 8)
                if ids[i] not in ids[:i] and (w := _word(tok, ids[i:i + 1])))
    for n, word in ((1, _word(tok, ids[:1])), last):
        assert word is not None, ids
        got = _both_ensembles(url, prompt, n, stop_words=[word])
        assert got["ensemble"] == got["ensemble_aggregated"], (n, word, got)
        assert got["ensemble"][0] == per_token[:n], (n, word)
