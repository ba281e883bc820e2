"""KV-aware routing and conditional disaggregation on the real server (issue 27, items 2-3).

One supervised deployment (``pdtrt serve --detach``) of the reference engines with two
endpoints per phase, block reuse on both pools, ``router.routing: kv_aware`` and local
prefill of net-new prompts up to ``LOCAL`` tokens. Multi-turn conversations go to the router
as token ids: each later turn resends the conversation so far. Checked: every answer is the
greedy answer of an in-process reference LLM without block reuse (a cache hit changes no
token); a long follow-up turn is prefilled on the endpoint that holds its history (the
engines' own reuse counters say so); a short one is prefilled by the decode endpoint that
decoded the previous turn (no prefill call, counted with its reason); and a prefill endpoint
whose stub is killed and reloaded is not routed to by its old index.
"""

from __future__ import annotations

import random
import time

import pytest
from e2e_client import engine_inputs, generate, metric, wait_for
from supervised_server import edited_example, kill_model, serve_detached, stop

pytestmark = [pytest.mark.triton, pytest.mark.slow]

TPB = 16  # the example's tokens_per_block
LOCAL = 40  # router.max_local_prefill_tokens
PREFILLS, DECODES = ("prefill", "prefill_b"), ("decode", "decode_b")
ANSWER = 8


@pytest.fixture(scope="module")
def served(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("kv-routing")

    def edit(spec: dict) -> None:
        for phase in ("prefill", "decode"):
            spec[phase]["endpoints"] = [{"model": phase}, {"model": f"{phase}_b"}]
            spec[phase]["engine"]["enable_block_reuse"] = True
        spec["router"].update(routing="kv_aware", max_local_prefill_tokens=LOCAL,
                              kv_events_interval_s=0.1)
    path = edited_example(work, "kv-routing.yaml", edit)
    info = serve_detached(path, root, work)
    yield info, work, root
    stop(work)


@pytest.fixture(scope="module")
def oracle(served):
    """Greedy answers of the same engine in this process, block reuse off."""
    from pdtrt.llmapi.reference import LLM, SamplingParams

    _info, _work, root = served
    llm = LLM(str(root / "reference-cpu" / "prefill"), skip_tokenizer_init=True,
              max_batch_size=1, max_num_tokens=2048, max_seq_len=512,
              kv_cache_config={"tokens_per_block": TPB, "enable_block_reuse": False})

    def answer(prompt: list[int]) -> list[int]:
        out = llm.generate_async(prompt, SamplingParams(max_tokens=ANSWER, end_id=-1, top_k=1))
        return list(out.result(timeout=60).outputs[0].token_ids)
    yield answer
    llm.shutdown()


def ask(url: str, prompt: list[int], rid: str) -> list[int]:
    got = generate(url, "router", engine_inputs(prompt, ANSWER), request_id=rid,
                   output="output_ids", timeout_s=60)
    assert got.error is None and got.final_seen, got.error
    return [int(t) for chunk in got.texts for t in chunk.reshape(-1)]


def counters(metrics_url: str, name: str, models) -> dict[str, float]:
    return {m: metric(metrics_url, name, model=m) for m in models}


def caught_up() -> None:
    """Wait until what the router and engines counted so far has reached the metrics port
    (each flushes its counters every 0.1 s): a baseline read sooner can miss the last
    request's increments."""
    time.sleep(0.5)


def settled(check) -> bool:
    """``check`` holds within a few seconds (counters reach the metrics port every 0.1 s)."""
    return wait_for(check, timeout_s=5)


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, 500) for _ in range(n)]


def test_turns_go_where_their_history_is_and_answer_as_without_reuse(served, oracle):
    info, _work, _root = served
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    rng = random.Random(3)
    system = tokens(rng, 48)
    history = {c: system + tokens(rng, 50) for c in range(4)}
    for c, prompt in history.items():  # turn 1: at least 50 net-new tokens: remote
        answer = ask(url, prompt, f"c{c}t1")
        assert answer == oracle(prompt), c
        history[c] = prompt + answer
    caught_up()
    remote_before = metric(metrics_url, "pdtrt_router_prefill_path_total", path="remote",
                           reason="long_net_new")
    reused_before = counters(metrics_url, "pdtrt_engine_kv_reused_blocks_total", PREFILLS)
    cached_before = metric(metrics_url, "pdtrt_router_kv_cached_tokens_total", phase="prefill")
    for c in history:  # turn 2, long: 60 new tokens, remote again -- where turn 1's prompt is
        prompt = history[c] + tokens(rng, 60)
        answer = ask(url, prompt, f"c{c}t2")
        assert answer == oracle(prompt), c
        history[c] = prompt + answer
    assert settled(lambda: metric(metrics_url, "pdtrt_router_prefill_path_total",
                                  path="remote", reason="long_net_new") == remote_before + 4)
    # every turn-1 prompt block came from its prefill's cache, and the router chose by it
    assert settled(lambda: sum(counters(metrics_url, "pdtrt_engine_kv_reused_blocks_total",
                                        PREFILLS).values())
                   - sum(reused_before.values()) >= 4 * (98 // TPB))
    assert settled(lambda: metric(metrics_url, "pdtrt_router_kv_cached_tokens_total",
                                  phase="prefill") - cached_before >= 4 * (98 // TPB) * TPB)

    caught_up()
    local_before = metric(metrics_url, "pdtrt_router_prefill_path_total", path="local",
                          reason="short_net_new")
    prefill_calls = counters(metrics_url, "pdtrt_engine_requests_total", PREFILLS)
    for c in history:  # turn 3, short: the decode endpoint of turn 2 holds all but ~10 tokens
        prompt = history[c] + tokens(rng, 10)
        answer = ask(url, prompt, f"c{c}t3")
        assert answer == oracle(prompt), c
    assert settled(lambda: metric(metrics_url, "pdtrt_router_prefill_path_total",
                                  path="local", reason="short_net_new") == local_before + 4)
    assert counters(metrics_url, "pdtrt_engine_requests_total", PREFILLS) == prefill_calls


def test_a_reloaded_prefill_is_not_routed_to_by_its_old_index(served, oracle):
    info, work, _root = served
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    rng = random.Random(5)
    prompt = tokens(rng, 96)
    caught_up()
    calls = counters(metrics_url, "pdtrt_engine_requests_total", PREFILLS)
    ask(url, prompt, "warm")  # six blocks, on one prefill endpoint
    caught_up()
    after = counters(metrics_url, "pdtrt_engine_requests_total", PREFILLS)
    (holder,) = [m for m in PREFILLS if after[m] > calls[m]]
    ejections = metric(metrics_url, "pdtrt_router_endpoint_ejections_total", phase="prefill",
                       endpoint=holder)
    kill_model(work / "repo", holder)  # idle: nothing in flight to lose
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_ejections_total",
                                   phase="prefill", endpoint=holder) > ejections, timeout_s=20)
    assert settled(lambda: metric(metrics_url, "pdtrt_router_kv_index_blocks",
                                  phase="prefill", endpoint=holder) == 0)  # cleared
    # The supervisor reloads it: an empty cache, and so an empty index once re-admitted.
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_healthy",
                                   phase="prefill", endpoint=holder) == 1, timeout_s=60)
    caught_up()
    cached_before = metric(metrics_url, "pdtrt_router_kv_cached_tokens_total", phase="prefill")
    follow_up = prompt + tokens(rng, 64)
    assert ask(url, follow_up, "after-reload") == oracle(follow_up)
    # The router counted as cached only what an endpoint really had: nothing of the reloaded
    # holder's six blocks (the other endpoint never had them).
    caught_up()  # what the router counted for it
    assert metric(metrics_url, "pdtrt_router_kv_cached_tokens_total",
                  phase="prefill") == cached_before
