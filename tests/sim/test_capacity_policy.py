"""The simulator admits by the capacity policy's rule in pdtrt.perf.scheduling, as the estimate
does: guaranteed-no-evict runs at most the sequences whose whole KV fits, max-utilization
runs more and pauses the last started ones when the cache fills."""

from __future__ import annotations

import pytest

from pdtrt.enums import KVDType, ServingMode
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import load_factors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.scheduling import CapacityPolicy, reserved_tokens, running_capacity
from pdtrt.sim import SimConfig, SimWorkload
from pdtrt.sim.entities import ReplicaRole
from pdtrt.sim.simulator import run_to_end
from pdtrt.workload import LengthDist, LoopKind

F = load_factors()


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


def _run(model, gpu, policy):
    # L40S, BF16 KV: about 69 sequences of 3072 tokens fit, far fewer than the 256 clients
    inst = Instance(model=model, gpu=gpu, kv_dtype=KVDType.BF16, max_batch_size=256,
                    capacity_policy=policy)
    wl = SimWorkload(loop=LoopKind.CLOSED, concurrency=256, isl=LengthDist.fixed(2048),
                     osl=LengthDist.fixed(1024))
    cfg = SimConfig(serving=ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst),
                    factors_prefill=F, factors_decode=F, workload=wl, num_requests=400,
                    warmup_share=0.0)
    state = run_to_end(cfg)
    return inst, state, state.replicas[ReplicaRole.AGGREGATED][0]


def test_reservation_rule():
    gne, mu = CapacityPolicy.GUARANTEED_NO_EVICT, CapacityPolicy.MAX_UTILIZATION
    assert reserved_tokens(gne, prompt=100, output=50, generated=0) == 150
    assert reserved_tokens(mu, prompt=100, output=50, generated=0) == 101
    assert reserved_tokens(mu, prompt=100, output=50, generated=50) == 150


def test_guaranteed_no_evict_runs_what_the_estimate_admits_and_never_pauses(llama8b, catalog):
    inst, state, replica = _run(llama8b, catalog.get("l40s"), CapacityPolicy.GUARANTEED_NO_EVICT)
    cap = running_capacity(inst, 2048, 1024)
    assert cap.limit == "KV cache"
    assert replica.peak_running == cap.seqs
    assert replica.num_paused == 0
    assert all(r.done_s is not None for r in state.requests)
    assert replica.used_blocks == 0


def test_max_utilization_runs_more_and_pauses_the_last_started(llama8b, catalog):
    gne = _run(llama8b, catalog.get("l40s"), CapacityPolicy.GUARANTEED_NO_EVICT)[2]
    inst, state, replica = _run(llama8b, catalog.get("l40s"), CapacityPolicy.MAX_UTILIZATION)
    assert replica.peak_running > gne.peak_running
    assert replica.num_paused > 0  # the cache filled as the answers grew
    # paused requests were prefilled again and finished with all their tokens
    assert all(r.done_s is not None and r.generated == r.osl for r in state.requests)
    assert replica.used_blocks == 0 and all(r.blocks == 0 for r in state.requests)
