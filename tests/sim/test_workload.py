"""What a simulation receives: the shared arrival generator and lengths, traces, closed loop."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.errors import WorkloadError
from pdtrt.sim.workload import SimWorkload, generate_requests
from pdtrt.workload import (
    ArrivalProcess,
    LengthDist,
    LoopKind,
    arrival_rng,
    arrival_times_s,
    parse_length,
    read_trace,
)

ONE = LengthDist.fixed(1)


def test_poisson_uses_the_shared_generator_and_lengths():
    w = SimWorkload(rate_per_s=5.0, isl=parse_length("uniform:500:1500"),
                    osl=parse_length("normal:100:20"))
    reqs = generate_requests(w, 1, 5000)
    times = [r.arrival_s for r in reqs]
    assert times == list(arrival_times_s(ArrivalProcess.POISSON, 5.0, arrival_rng(1),
                                         num_requests=5000))
    assert times[0] == 0.0
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() == pytest.approx(0.2, rel=0.05)
    isl = np.array([r.isl for r in reqs])
    assert 500 <= isl.min() and isl.max() <= 1500 and isl.mean() == pytest.approx(1000, rel=0.02)
    assert min(r.osl for r in reqs) >= 1
    assert generate_requests(w, 1, 50) == reqs[:50]  # request i does not depend on n


def test_constant_and_closed():
    w = SimWorkload(process=ArrivalProcess.CONSTANT, rate_per_s=4.0, isl=LengthDist.fixed(10),
                    osl=LengthDist.fixed(5))
    assert [r.arrival_s for r in generate_requests(w, 0, 3)] == [0.0, 0.25, 0.5]
    c = SimWorkload(loop=LoopKind.CLOSED, concurrency=2, isl=LengthDist.fixed(10),
                    osl=LengthDist.fixed(5))
    reqs = generate_requests(c, 0, 4)
    assert len(reqs) == 4 and all(r.arrival_s == 0 for r in reqs)


def test_a_timed_trace_is_replayed_in_arrival_order(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 1.5, "isl": 100, "osl": 10}\n'
                 '{"arrival_s": 0.5, "isl": 200}\n{"arrival_s": 2.5, "isl": 300}\n')
    w = SimWorkload(isl=ONE, osl=LengthDist.fixed(7), trace=read_trace(p))
    assert w.replays_trace and w.describe() == "trace of 3"
    reqs = generate_requests(w, 0, 2)  # the first two entries, then sorted
    assert [(r.arrival_s, r.isl, r.osl) for r in reqs] == [(0.5, 200, 7), (1.5, 100, 10)]


def test_a_trace_with_a_rate_supplies_lengths_only(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("isl,osl\n100,10\n200,20\n")
    w = SimWorkload(rate_per_s=2.0, isl=ONE, osl=ONE, trace=read_trace(p))
    assert not w.replays_trace
    reqs = generate_requests(w, 0, 5)
    assert [r.isl for r in reqs] == [100, 200, 100, 200, 100] and reqs[0].arrival_s == 0.0


def test_workload_needs_its_parameter(tmp_path):
    with pytest.raises(WorkloadError, match="need a request rate"):
        SimWorkload(isl=ONE, osl=ONE)
    with pytest.raises(WorkloadError, match="need a concurrency"):
        SimWorkload(loop=LoopKind.CLOSED, isl=ONE, osl=ONE)
    p = tmp_path / "t.jsonl"
    p.write_text('{"isl": 5}\n')
    with pytest.raises(WorkloadError, match="no arrival_s to replay"):
        SimWorkload(isl=ONE, osl=ONE, trace=read_trace(p))
