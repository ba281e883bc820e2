"""The reported latency distribution: linear percentiles in ms, None without samples."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.enums import Percentile
from pdtrt.workload import Dist


def test_percentiles_interpolate_linearly_in_ms():
    d = Dist.of_seconds([0.001 * x for x in range(1, 101)])  # 1..100 ms
    assert (d.count, d.min, d.max) == (100, 1.0, 100.0)
    assert d.mean == pytest.approx(50.5) and d.p50 == pytest.approx(50.5)
    assert d.p90 == pytest.approx(90.1) and d.p99 == pytest.approx(99.01)
    assert d.at(Percentile.P95) == d.p95 == pytest.approx(95.05)
    assert Dist.of_seconds(np.array([0.002])).at(Percentile.P90) == pytest.approx(2.0)


def test_no_samples_is_none_not_zero():
    d = Dist.of_seconds([])
    assert d.count == 0 and all(v is None for k, v in d.to_dict().items() if k != "count")
    assert d.at(Percentile.P99) is None
