"""A decode pool mixing GPU types (issue 47, item 4): one L40S beside one H100, fed by an H100
prefill pool in a closed loop that needs more KV than half the pool's blocks at the L40S.
Least-loaded routing gives both the same requests and fills the L40S; kv-capacity routing (the
router's ``kv_capacity``: the used fraction of a replica's blocks after the request) fills
both in proportion and neither to capacity."""

from __future__ import annotations

import pytest

from pdtrt.enums import KVDType, ServingMode, WeightQuant
from pdtrt.errors import InfeasibleError
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import load_factors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.sim import SimConfig, SimWorkload
from pdtrt.sim.entities import ReplicaRole
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.simulator import run_to_end
from pdtrt.workload import LengthDist, LoopKind

F = load_factors()


@pytest.fixture(scope="module")
def mixed(catalog):
    from pdtrt.facts.model import load_model_facts

    llama8b = load_model_facts("meta-llama/Meta-Llama-3.1-8B")
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")

    def inst(gpu):
        return Instance(model=llama8b, gpu=gpu, weights=WeightQuant.FP8, kv_dtype=KVDType.FP8,
                        max_batch_size=512)
    serving = ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=inst(h100),
                            prefill_instances=2, decode=inst(l40s), decode_instances=1,
                            link=kv_link(h100, l40s, same_node=False))
    return serving, inst(h100)


def _run(mixed, routing):
    serving, h100 = mixed
    workload = SimWorkload(loop=LoopKind.CLOSED, concurrency=300,
                           isl=LengthDist.fixed(3000), osl=LengthDist.fixed(500))
    state = run_to_end(SimConfig(serving=serving, factors_prefill=F, factors_decode=F,
                                 workload=workload, num_requests=600,
                                 extra_decode=((h100, 1),), decode_routing=routing))
    return {r.instance.gpu.name.split()[0]: r.peak_used_blocks / r.kv_blocks
            for r in state.replicas[ReplicaRole.DECODE]}


def test_kv_capacity_fills_a_mixed_decode_pool_in_proportion(mixed):
    # 300 clients x 3500 tokens: 66 k blocks of 16 against 16.3 k at the L40S and 31 k at the
    # H100 -- half of them (least-loaded) overfill the L40S: it runs full, the rest wait
    least = _run(mixed, RoutingPolicy.LEAST_LOADED)
    assert least["L40S"] > 0.99 and least["H100"] < 0.6
    capacity = _run(mixed, RoutingPolicy.KV_CAPACITY)
    assert capacity["L40S"] < 0.75 and capacity["H100"] < 0.75
    assert capacity["L40S"] == pytest.approx(capacity["H100"], abs=0.02)  # in proportion


def test_a_mixed_decode_pool_needs_a_disaggregated_configuration(mixed):
    serving, h100 = mixed
    aggregated = ServingConfig(mode=ServingMode.AGGREGATED, prefill=h100)
    with pytest.raises(InfeasibleError, match="extra_decode"):
        SimConfig(serving=aggregated, factors_prefill=F, factors_decode=F,
                  workload=SimWorkload(loop=LoopKind.CLOSED, concurrency=1,
                                       isl=LengthDist.fixed(8), osl=LengthDist.fixed(8)),
                  extra_decode=((h100, 1),))
