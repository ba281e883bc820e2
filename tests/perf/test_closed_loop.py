"""The closed-loop prompt queue (finite population, deterministic times) and its use."""

from __future__ import annotations

import pytest

from pdtrt.perf.closed_loop import prompt_queue


def test_light_load_waits_for_the_burst_only():
    r, x, q = prompt_queue(8, service_s=0.1, think_s=100.0, burst=5)
    assert r == pytest.approx(0.1 * (1 + 4 / 2))  # own service + half the 4 burst-mates
    assert x == pytest.approx(8 / (100.0 + r)) and q == pytest.approx(0, abs=1e-12)


def test_saturated_server_bounds_throughput_and_queues_the_rest():
    r, x, q = prompt_queue(100, service_s=0.1, think_s=2.0)
    assert x == pytest.approx(10.0)  # 1 / S
    assert r == pytest.approx(100 / 10.0 - 2.0)  # C / X - Z: the prompt queue
    assert q == pytest.approx(r / 0.1 - 1)
    assert r < 100 * 0.1  # never more than C services: bounded


@pytest.mark.parametrize("clients", [1, 4, 16, 64, 256])
def test_littles_law_holds(clients):
    r, x, _ = prompt_queue(clients, service_s=0.05, think_s=1.5, burst=3)
    assert x * (r + 1.5) == pytest.approx(clients)
