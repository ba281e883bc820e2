"""Arrival processes, length distributions, traces."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.errors import PdtrtError
from pdtrt.sim.workload import (
    ArrivalKind,
    LengthDist,
    LengthKind,
    Workload,
    generate_requests,
    read_trace,
)


def test_poisson_rate_and_lengths():
    w = Workload(arrivals=ArrivalKind.POISSON, rate_per_s=5.0,
                 isl=LengthDist(kind=LengthKind.UNIFORM, mean=1000, spread=0.5),
                 osl=LengthDist(kind=LengthKind.NORMAL, mean=100, spread=0.2))
    reqs = generate_requests(w, np.random.default_rng(1), 5000)
    gaps = np.diff([r.arrival_s for r in reqs])
    assert gaps.mean() == pytest.approx(0.2, rel=0.05) and gaps.std() == pytest.approx(0.2,
                                                                                        rel=0.05)
    isl = np.array([r.isl for r in reqs])
    assert 500 <= isl.min() and isl.max() <= 1500 and isl.mean() == pytest.approx(1000, rel=0.02)
    assert min(r.osl for r in reqs) >= 1


def test_constant_and_closed():
    w = Workload(arrivals=ArrivalKind.CONSTANT, rate_per_s=4.0, isl=LengthDist(mean=10),
                 osl=LengthDist(mean=5))
    assert [r.arrival_s for r in generate_requests(w, np.random.default_rng(0), 3)] == [
        0.25, 0.5, 0.75]
    c = Workload(arrivals=ArrivalKind.CLOSED, concurrency=2, isl=LengthDist(mean=10),
                 osl=LengthDist(mean=5))
    assert all(r.arrival_s == 0 for r in generate_requests(c, np.random.default_rng(0), 4))


def test_trace_file(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,isl,osl\n1.5,100,10\n0.5,200,20\n")
    w = Workload(arrivals=ArrivalKind.TRACE, isl=LengthDist(mean=1), osl=LengthDist(mean=1),
                 trace=read_trace(p))
    reqs = generate_requests(w, np.random.default_rng(0), 0)
    assert [(r.arrival_s, r.isl) for r in reqs] == [(0.5, 200), (1.5, 100)]
    p.write_text("arrival_s,isl,osl\nsoon,100,10\n")
    with pytest.raises(PdtrtError, match="t.csv:2"):
        read_trace(p)


def test_workload_needs_its_parameter():
    with pytest.raises(PdtrtError, match="need a request rate"):
        Workload(arrivals=ArrivalKind.POISSON, isl=LengthDist(mean=1), osl=LengthDist(mean=1))
    with pytest.raises(PdtrtError, match="need a concurrency"):
        Workload(arrivals=ArrivalKind.CLOSED, isl=LengthDist(mean=1), osl=LengthDist(mean=1))
