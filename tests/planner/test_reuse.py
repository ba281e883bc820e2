"""The planner on a chat workload: kv_aware routing against least_load, conditional
disaggregation's threshold from simulation, and a spec that serves what was simulated."""

from __future__ import annotations

import pytest
import yaml

from pdtrt.enums import ServingMode, WeightQuant
from pdtrt.planner.request import STEADY_CONVERSATIONS, resolve_request
from pdtrt.planner.reuse import (
    LOCAL_PREFILL_STEPS,
    QUEUE_DEPTH_STEPS,
    SimRun,
    _better,
    compare_routing,
    sweep_local_prefill,
)
from pdtrt.planner.search import _sim_config, plan
from pdtrt.planner.space import SearchBounds
from pdtrt.planner.spec_writer import spec_text
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.simulator import simulate
from pdtrt.spec.load import load_deployment
from pdtrt.workload import ConversationShape
from tests.planner.test_search import request
from tests.sim.test_simulator import disagg


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


def chat(model, catalog, **kw):
    args = {"isl": 1200, "osl": 100, "shared_prefix": 1000, "turns": 4, "followup_isl": 100,
            "think_s": 1.0, "rate": 12.0, "ttft": 500.0, "itl": 30.0,
            "bounds": SearchBounds(max_gpus=6), **kw}
    return request(model, catalog, **args)


@pytest.fixture(scope="module")
def chat_plan(llama8b, catalog):
    return plan(chat(llama8b, catalog))


def test_a_chat_request_simulates_conversations_long_enough_with_kv_aware(llama8b, catalog):
    req = chat(llama8b, catalog)
    assert req.routing is RoutingPolicy.KV_AWARE
    w = req.workload
    assert (w.turns, w.shared_prefix, w.think_s, str(w.followup_isl)) == (4, 1000, 1.0, "100")
    assert w.rate_per_s == pytest.approx(12.0 / 4)  # --rate counts turns
    open_at_once = -(-12.0 * (1.0 + (500 + 30 * 100) / 1e3) // 1)
    assert req.sim_requests == 4 * STEADY_CONVERSATIONS * open_at_once > req.num_requests
    one = request(llama8b, catalog, isl=1200, osl=100)
    assert one.routing is RoutingPolicy.LEAST_LOADED and one.sim_requests == one.num_requests
    assert one.workload.rate_per_s == one.rate_per_s and one.workload.turns == 1


def test_chat_plan_verifies_with_kv_aware_and_compares_least_load(chat_plan):
    p = chat_plan
    assert p.ranked, p.verdict
    for c in p.simulated:  # every verifying simulation found the conversations' history
        assert c.sim.reuse is not None
        assert c.sim.cached_prompt_tokens > 0.5 * c.sim.prompt_tokens
    r = p.routing
    assert r is not None and r.config == p.chosen.config.label()
    kv, ll = r.runs["kv_aware"], r.runs["least_load"]
    assert kv == SimRun.of(p.chosen.sim)  # the verifying run itself
    # the same requests (same seed; which ones finish inside the measurement may differ)
    assert kv.prompt_tokens == pytest.approx(ll.prompt_tokens, rel=0.01)
    assert kv.computed_prompt_tokens <= ll.computed_prompt_tokens
    assert r.computed_saved_share == pytest.approx(
        1 - kv.computed_prompt_tokens / ll.computed_prompt_tokens)
    d = p.to_dict()
    assert d["routing"]["runs"]["least_load"]["computed_prompt_tokens"] == \
        ll.computed_prompt_tokens


def test_kv_aware_saves_prompt_tokens_where_there_is_a_choice(llama8b, catalog):
    """Two prefill instances: least_load scatters a conversation's turns over them."""
    req = chat(llama8b, catalog, rate=6.0)
    config = disagg(llama8b, catalog.get("h100-sxm"), catalog.get("h100-sxm"), 2, 2)
    base = _sim_config(req, config)
    comparison = compare_routing(base, simulate(base), simulate)
    kv, ll = comparison.runs["kv_aware"], comparison.runs["least_load"]
    assert kv.computed_prompt_tokens < 0.8 * ll.computed_prompt_tokens
    assert comparison.computed_saved_share > 0.2 and comparison.has_choice


def test_the_chat_spec_serves_what_was_simulated(chat_plan, llama8b, tmp_path):
    path = tmp_path / "pdtrt.yaml"
    text = spec_text(chat_plan, model_name=llama8b.name)
    path.write_text(text)
    dep = load_deployment(path)
    longest = ConversationShape(isl=1200, osl=100, shared_prefix=1000, turns=4,
                                followup_isl=100).longest_prompt
    for pool in (dep.spec.prefill, dep.spec.decode):
        assert pool.engine.enable_block_reuse
        assert pool.engine.max_input_len == longest == 1800
        assert pool.engine.max_seq_len == longest + 100
    assert dep.spec.router.routing.value == "kv_aware"
    assert "#12542" in text and "chat workload (4 turns, shared prefix 1000 tokens)" in text
    local = chat_plan.local_prefill
    assert local is not None and f"# conditional disaggregation: {local.why}" in text
    assert dep.spec.router.max_local_prefill_tokens == local.chosen
    assert dep.spec.router.max_prefill_queue_depth == local.chosen_queue_depth


def test_a_single_request_spec_keeps_the_router_defaults(llama8b, catalog):
    p = plan(request(llama8b, catalog, bounds=SearchBounds(max_gpus=8)))
    assert p.routing is None
    spec = yaml.safe_load(spec_text(p, model_name=llama8b.name))
    assert "router" not in spec and "enable_block_reuse" not in spec["decode"]["engine"]
    # ISL 3000 never fits the decode engine's step: nothing to sweep, said so
    local = p.local_prefill
    assert local is not None and local.runs == local.queue_runs == {}
    assert local.chosen == local.chosen_queue_depth == 0
    assert f"max_num_tokens {local.decode_max_num_tokens} < the shortest prompt" in local.why


def test_the_local_prefill_sweep_picks_by_goodput_then_ttft(llama8b, catalog):
    req = request(llama8b, catalog, isl=300, osl=100, rate=10.0, ttft=300.0, itl=50.0,
                  bounds=SearchBounds(max_gpus=6))
    p = plan(req)
    best = p.best(ServingMode.DISAGGREGATED)
    assert best is not None and p.local_prefill is not None
    sweep = p.local_prefill
    limit = best.config.decode.max_num_tokens
    # every step up to the first that takes the whole prompt, no further
    assert list(sweep.runs) == [t for t in LOCAL_PREFILL_STEPS if t < 300] + [512]
    assert all(t <= limit for t in sweep.runs)
    assert sweep.runs[0].local_prefills == 0 and sweep.runs[512].remote_prefills == 0
    assert sweep.runs[512].local_prefills > 0
    winner = sweep.runs[sweep.chosen]
    assert all(not _better((t, r), (sweep.chosen, winner)) for t, r in sweep.runs.items())
    # then the queue depth, with that threshold: off is the threshold's own run
    assert list(sweep.queue_runs) == list(QUEUE_DEPTH_STEPS)
    assert sweep.queue_runs[0] == winner
    depth = sweep.chosen_queue_depth
    assert all(not _better((d, r), (depth, sweep.queue_runs[depth]))
               for d, r in sweep.queue_runs.items())
    # a fresh sweep of the same configuration is the same (seeded)
    base = _sim_config(req, best.config)
    again = sweep_local_prefill(base, simulate(base), req.shape, simulate)
    assert (again.chosen, again.runs, again.queue_runs) == (sweep.chosen, sweep.runs,
                                                             sweep.queue_runs)


def _run(goodput, ttft, met=True):
    return SimRun(prompt_tokens=1, computed_prompt_tokens=1, ttft_p50_ms=ttft,
                  ttft_at_slo_ms=ttft, goodput_req_per_s=goodput, slo_met=met)


def test_better_threshold_rule():
    assert _better((64, _run(5.0, 90.0)), (0, _run(9.0, 50.0, met=False)))  # SLO first
    assert _better((64, _run(9.0, 90.0)), (0, _run(8.0, 50.0)))  # then goodput
    assert _better((64, _run(9.0, 50.0)), (0, _run(9.05, 60.0)))  # a 1 % tie: TTFT
    assert _better((0, _run(9.0, 50.0)), (64, _run(9.0, 50.0)))  # then the smaller
    assert not _better((64, _run(9.0, 50.0)), (0, _run(9.0, 50.0)))


def test_one_replica_per_pool_leaves_the_routing_no_choice(llama8b, catalog):
    req = chat(llama8b, catalog, rate=2.0)
    config = disagg(llama8b, catalog.get("h100-sxm"), catalog.get("h100-sxm"), 1, 1)
    base = _sim_config(req, config)
    comparison = compare_routing(base, simulate(base), simulate)
    assert not comparison.has_choice
    kv, ll = comparison.runs["kv_aware"], comparison.runs["least_load"]
    assert kv.computed_prompt_tokens == ll.computed_prompt_tokens


def test_a_sweep_that_prefills_everything_locally_says_the_prefill_pool_idles():
    """Llama-3.1-8B FP8 128/128 at 100 req/s: the best split (an L40S prefill, an H100
    decode) serves best with every prompt prefilled on the H100 -- which the plan says."""
    req = resolve_request(model_ref="meta-llama/Meta-Llama-3.1-8B", gpus="h100-sxm,l40s",
                          isl=128, osl=128, rate_per_s=100, ttft_p90_ms=500, itl_p90_ms=30,
                          max_gpus=8, weights=WeightQuant.FP8)
    sweep = plan(req).local_prefill
    assert sweep is not None and sweep.chosen == 128
    run = sweep.queue_runs[sweep.chosen_queue_depth]
    assert run.remote_prefills == 0 < run.local_prefills
    assert "every prompt local leaves the prefill pool idle" in sweep.why
    assert sweep.runs[0].local_prefills == 0  # off: all remote
