"""benchmarks/_cheapest.py: the fewest instances and the cheapest pool pair, on predicates whose
answer is known."""

from __future__ import annotations

import pytest

from tests.benchmarks.conftest import load_script

cheapest = load_script("_cheapest")



@pytest.mark.parametrize(("threshold", "low", "expected"), [
    (1, 1, 1), (5, 1, 5), (37, 1, 37), (37, 20, 37), (3, 10, 10), (64, 1, 64), (65, 1, None),
])
def test_fewest_finds_the_threshold(threshold, low, expected):
    calls = []

    def meets(n):
        calls.append(n)
        return n >= threshold

    assert cheapest.fewest(meets, low, 64) == expected
    assert len(calls) <= 15  # doubling then bisection, not a scan


def test_cheapest_pair_trades_prompt_for_decode_instances():
    # decode instances needed fall as prompt instances rise; a prompt instance costs 3, a
    # decode instance 1: (2, 6) costs 12, (3, 2) costs 11, (4, 1) costs 13
    need = {1: None, 2: 6, 3: 2, 4: 1}

    def meets(a, b):
        return need.get(a, 1) is not None and b >= need.get(a, 1)

    def cost(a, b):
        return 3 * a + b

    assert cheapest.cheapest_pair(meets, cost, high=20) == (3, 2)


def test_cheapest_pair_is_none_when_nothing_meets():
    assert cheapest.cheapest_pair(lambda a, b: False, lambda a, b: a + b, high=4) is None
