"""The run's state records which replicas want a schedule; only the event loop makes events."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pdtrt.sim.state
from pdtrt.enums import KVDType, ServingMode
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.sim import SimConfig, SimWorkload
from pdtrt.sim.entities import ReplicaRole
from pdtrt.sim.state import SimState
from pdtrt.workload import LengthDist

F = EfficiencyFactors(gemm_eff=0.5, attention_eff=0.4, bandwidth_eff=0.8,
                      step_overhead_s=3e-4, allreduce_latency_s=1e-5)


@pytest.fixture(scope="module")
def state_of(catalog):
    from pdtrt.facts.model import load_model_facts

    model, h100 = load_model_facts("meta-llama/Meta-Llama-3.1-8B"), catalog.get("h100-sxm")
    inst = Instance(model=model, gpu=h100, kv_dtype=KVDType.FP8)
    serving = ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=inst, prefill_instances=2,
                            decode=inst, decode_instances=1,
                            link=kv_link(h100, h100, same_node=True))

    def make() -> SimState:
        return SimState(SimConfig(serving=serving, factors_prefill=F, factors_decode=F,
                                  workload=SimWorkload(rate_per_s=1.0, isl=LengthDist.fixed(100),
                                                       osl=LengthDist.fixed(10))))

    return make


def test_wanted_schedules_are_recorded_once_in_order(state_of):
    s = state_of()
    s.want_schedule(ReplicaRole.PREFILL, 1)
    s.want_schedule(ReplicaRole.DECODE, 0)
    s.want_schedule(ReplicaRole.PREFILL, 1)  # already pending
    assert s.take_wanted_schedules() == [(ReplicaRole.PREFILL, 1), (ReplicaRole.DECODE, 0)]
    assert s.take_wanted_schedules() == []
    s.want_schedule(ReplicaRole.PREFILL, 1)  # its event has not run yet
    assert s.take_wanted_schedules() == []
    s.schedule_done(ReplicaRole.PREFILL, 1)
    s.want_schedule(ReplicaRole.PREFILL, 1)
    assert s.take_wanted_schedules() == [(ReplicaRole.PREFILL, 1)]


def test_a_busy_replica_is_not_woken_except_decode(state_of):
    s = state_of()
    s.replica(ReplicaRole.PREFILL, 0).busy = True
    s.replica(ReplicaRole.DECODE, 0).busy = True
    s.want_schedule(ReplicaRole.PREFILL, 0)
    s.want_schedule(ReplicaRole.DECODE, 0)  # admits KV hand-offs between steps
    assert s.take_wanted_schedules() == [(ReplicaRole.DECODE, 0)]


def test_state_never_imports_events():
    tree = ast.parse(Path(pdtrt.sim.state.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "pdtrt.sim.config" in imported  # the walk sees the imports
    assert not any(m and m.startswith("pdtrt.sim.events") for m in imported)
