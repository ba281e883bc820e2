"""The one arrival generator: seeded, first arrival at 0, the rate honoured, gaps unclipped."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdtrt.errors import WorkloadError
from pdtrt.workload import ArrivalProcess, arrival_rng, arrival_times_s


def test_same_seed_same_schedule_other_seed_differs_first_at_zero():
    a = arrival_times_s(ArrivalProcess.POISSON, 5.0, arrival_rng(1), num_requests=50)
    b = arrival_times_s(ArrivalProcess.POISSON, 5.0, arrival_rng(1), num_requests=50)
    c = arrival_times_s(ArrivalProcess.POISSON, 5.0, arrival_rng(2), num_requests=50)
    assert a == b and a != c and len(a) == 50
    assert a[0] == c[0] == 0.0 and a[1] > 0  # the documented convention


@pytest.mark.parametrize("rate", [0.5, 4.0, 200.0])
def test_poisson_rate_is_honoured(rate):
    times = arrival_times_s(ArrivalProcess.POISSON, rate, np.random.default_rng(7),
                            num_requests=20_001)
    measured = (len(times) - 1) / times[-1]  # n arrivals span n - 1 gaps
    assert measured == pytest.approx(rate, rel=0.03)


def test_poisson_gaps_are_exponential_not_clipped():
    rate = 10.0
    gaps = np.diff(arrival_times_s(ArrivalProcess.POISSON, rate, np.random.default_rng(3),
                                   num_requests=50_001))
    # P(gap > 3/rate) = e^-3 = 0.0498 for an exponential; clipping long gaps would lose them
    assert np.mean(gaps > 3 / rate) == pytest.approx(math.exp(-3), abs=0.005)
    assert gaps.max() > 8 / rate
    assert np.std(gaps) == pytest.approx(1 / rate, rel=0.03)  # exponential: std == mean


def test_constant_gaps_are_exact():
    times = arrival_times_s(ArrivalProcess.CONSTANT, 4.0, np.random.default_rng(0),
                            num_requests=9)
    assert times == pytest.approx([0.25 * i for i in range(9)])


def test_duration_bound_and_both_bounds():
    times = arrival_times_s(ArrivalProcess.CONSTANT, 2.0, np.random.default_rng(0),
                            duration_s=3.0)
    assert times == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    times = arrival_times_s(ArrivalProcess.CONSTANT, 2.0, np.random.default_rng(0),
                            duration_s=3.0, num_requests=3)
    assert len(times) == 3


@pytest.mark.parametrize(("rate", "kwargs", "match"), [
    (0.0, {"num_requests": 3}, "rate must be > 0"),
    (math.nan, {"num_requests": 3}, "rate must be > 0"),
    (1.0, {}, "needs a bound"),
    (1.0, {"num_requests": -1}, "count must be >= 0"),
], ids=["zero-rate", "nan-rate", "no-bound", "negative-count"])
def test_bad_arguments(rate, kwargs, match):
    with pytest.raises(WorkloadError, match=match):
        arrival_times_s(ArrivalProcess.POISSON, rate, np.random.default_rng(0), **kwargs)
