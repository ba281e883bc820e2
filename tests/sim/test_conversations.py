"""Multi-turn conversations, per-instance prefix reuse, kv-aware routing and conditional
disaggregation in the simulator."""

from __future__ import annotations

import dataclasses

import pytest

from pdtrt.errors import InfeasibleError, WorkloadError
from pdtrt.sim import SimConfig, SimWorkload, simulate
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.workload import generate_conversations
from pdtrt.workload import LengthDist, parse_length
from tests.sim.test_simulator import F, agg, disagg

H100 = "h100-sxm"


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


@pytest.fixture(scope="module")
def h100(catalog):
    return catalog.get(H100)


def chat(turns=4, think_s=2.0, rate=2.0, **kw):
    return SimWorkload(rate_per_s=rate, isl=LengthDist.fixed(1536), osl=LengthDist.fixed(128),
                       shared_prefix=1024, turns=turns, think_s=think_s, **kw)


def run(serving, workload, n=240, seed=0, **kw):
    return simulate(SimConfig(serving=serving, factors_prefill=F, factors_decode=F,
                              workload=workload, num_requests=n, seed=seed, **kw))


def test_a_turn_prompt_is_the_conversation_so_far_plus_new_tokens():
    w = chat(followup_isl=LengthDist.fixed(100))
    convs = generate_conversations(w, 0, 10)  # 3 conversations: 4 + 4 + 2 turns
    assert [len(c) for c in sorted(convs, key=lambda c: c[0].conversation)] == [4, 4, 2]
    assert [t.isl for t in convs[0]] == [1536, 1536 + 128 + 100, 1536 + 2 * 228, 1536 + 3 * 228]
    assert {t.turn for t in convs[0]} == {0, 1, 2, 3}


def test_turns_1_reproduces_the_single_request_simulation_exactly(llama8b, h100):
    """Pinned from the simulator before conversations existed (commit ea2e977); re-pinned when
    equally loaded replicas started taking turns (the router's tie-break), nothing else."""
    w = SimWorkload(rate_per_s=6.0, isl=parse_length("uniform:500:3000"),
                    osl=parse_length("uniform:20:200"), shared_prefix=512)
    pinned = [(41.912632894864466, 95.54396365558392, 35.873624727444486, 1242.970014336606,
               27326, 138208),
              (39.044300150592015, 79.66878313446759, 6.205334638806903, 1122.0904781205886,
               32036, 138208)]
    for serving, want in zip((agg(llama8b, h100, 2), disagg(llama8b, h100, h100, 2, 2)),
                             pinned, strict=True):
        d = run(serving, w, n=300, seed=3).to_dict()
        assert (d["ttft_ms"]["p50"], d["ttft_ms"]["p99"], d["itl_ms"]["p99"],
                d["e2e_ms"]["p90"], d["num_events"], d["cached_prompt_tokens"]) == want
        assert "reuse" not in d


def test_kv_aware_routing_computes_fewer_prompt_tokens(llama8b, h100):
    """Later turns find their history only on the instances that served the conversation."""
    serving = disagg(llama8b, h100, h100, 2, 2)
    res = {r: run(serving, chat(), routing=r) for r in RoutingPolicy}
    kv = res[RoutingPolicy.KV_AWARE].reuse
    for r in (RoutingPolicy.ROUND_ROBIN, RoutingPolicy.LEAST_LOADED):
        other = res[r].reuse
        assert res[r].prompt_tokens == res[RoutingPolicy.KV_AWARE].prompt_tokens
        assert kv.computed_prompt_tokens < 0.9 * other.computed_prompt_tokens, r
    # the same on an aggregated pair
    a = {r: run(agg(llama8b, h100, 2), chat(), routing=r).reuse.computed_prompt_tokens
         for r in (RoutingPolicy.KV_AWARE, RoutingPolicy.ROUND_ROBIN)}
    assert a[RoutingPolicy.KV_AWARE] < 0.9 * a[RoutingPolicy.ROUND_ROBIN]


def test_conditional_disaggregation_prefills_short_follow_ups_on_the_decode_side(llama8b, h100):
    """Long first turns keep the one prefill instance busy: a short follow-up prefilled where
    its history already is skips that queue (at low load, a remote prefill of 100 tokens is
    as fast as a local one beside decoding: TTFT is not lower there)."""
    serving = disagg(llama8b, h100, h100, 1, 2, same_node=False)
    w = dataclasses.replace(chat(followup_isl=LengthDist.fixed(100), rate=6.0),
                            isl=LengthDist.fixed(4096))
    kw = {"routing": RoutingPolicy.KV_AWARE}
    remote, local = run(serving, w, **kw), run(serving, w, max_local_prefill_tokens=256, **kw)
    assert remote.reuse.num_local_prefills == 0
    # a later turn's decode instance holds its history: 100 tokens + a part block are new
    later = local.reuse.ttft_later_turns_s.size
    assert later > 100 and 0.9 * later <= local.reuse.num_local_prefills <= later
    assert local.reuse.num_local_prefills + local.reuse.num_remote_prefills == \
        len(local.outcomes)
    assert local.reuse.kv_transfer_bytes < 0.5 * remote.reuse.kv_transfer_bytes
    assert (float(local.reuse.ttft_later_turns_s.mean())
            < 0.5 * float(remote.reuse.ttft_later_turns_s.mean()))
    d = local.to_dict()["reuse"]
    assert d["num_local_prefills"] == local.reuse.num_local_prefills
    assert d["ttft_later_turns_ms"]["count"] == later


def test_conversations_are_deterministic_for_a_seed(llama8b, h100):
    serving = disagg(llama8b, h100, h100, 2, 1)
    w = dataclasses.replace(chat(), isl=parse_length("uniform:600:2000"),
                            followup_isl=parse_length("uniform:20:300"))
    kw = {"routing": RoutingPolicy.KV_AWARE, "max_local_prefill_tokens": 256}
    a, b, c = run(serving, w, seed=1, **kw), run(serving, w, seed=1, **kw), \
        run(serving, w, seed=2, **kw)
    assert a.to_dict() == b.to_dict()
    assert a.to_dict()["reuse"] != c.to_dict()["reuse"]


@pytest.mark.parametrize(("kw", "match"), [
    ({"turns": 0}, "turns must be >= 1"),
    ({"turns": 2, "think_s": -1.0}, "think_s must be a finite number >= 0"),
    ({"turns": 2, "think_s": float("inf")}, "think_s must be a finite number >= 0"),
    ({"turns": 1, "think_s": 2.0}, "more than one turn"),
    ({"turns": 1, "followup_isl": LengthDist.fixed(5)}, "more than one turn"),
], ids=["no-turns", "negative-think", "infinite-think", "think-one-turn", "followup-one-turn"])
def test_bad_conversations_are_workload_errors(kw, match):
    with pytest.raises(WorkloadError, match=match):
        SimWorkload(rate_per_s=1.0, isl=LengthDist.fixed(10), osl=LengthDist.fixed(5), **kw)


def test_a_negative_local_prefill_threshold_is_refused(llama8b, h100):
    with pytest.raises(InfeasibleError, match="max_local_prefill_tokens must be >= 0"):
        run(disagg(llama8b, h100, h100, 1, 1), chat(), max_local_prefill_tokens=-1)


def test_a_queued_prefill_pool_sends_prompts_that_fit_to_the_decode_side(llama8b, h100):
    """The router's prefill_queued rule: while the least loaded prefill replica holds at least
    max_prefill_queue_depth requests, a prompt the decode engine takes in one step is
    prefilled there -- never a longer one."""
    serving = disagg(llama8b, h100, h100, 1, 2, prefill_batch=1)
    limit = serving.decode.max_num_tokens
    short = SimWorkload(rate_per_s=40.0, isl=parse_length(f"uniform:200:{2 * limit}"),
                        osl=LengthDist.fixed(20))
    off = run(serving, short, n=300)
    on = run(serving, short, n=300, max_prefill_queue_depth=2)
    assert off.reuse is None  # nothing conditional asked
    queued = on.reuse
    assert queued.num_local_prefills == queued.num_local_queued > 0
    assert queued.num_remote_prefills > 0
    assert len(on.outcomes) == queued.num_local_prefills + queued.num_remote_prefills
    # the queue it relieves: TTFT p90 falls
    assert on.ttft_ms.p90 < off.ttft_ms.p90
    # only prompts that fit one decode step went local
    big = SimWorkload(rate_per_s=40.0, isl=LengthDist.fixed(limit + 1), osl=LengthDist.fixed(20))
    assert run(serving, big, n=200, max_prefill_queue_depth=1).reuse.num_local_prefills == 0
    with pytest.raises(InfeasibleError, match="max_prefill_queue_depth must be >= 0"):
        run(serving, short, n=10, max_prefill_queue_depth=-1)
