"""Length distributions: the one syntax, its errors, the samples and their bounds."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.errors import WorkloadError
from pdtrt.workload import LengthDist, LengthKind, parse_length


@pytest.mark.parametrize(("text", "kind", "mean", "low", "high", "back"), [
    ("128", LengthKind.FIXED, 128, 128, 128, "128"),
    ("fixed:7", LengthKind.FIXED, 7, 7, 7, "7"),
    ("uniform:10:20", LengthKind.UNIFORM, 15, 10, 20, "uniform:10:20"),
    ("normal:64:8", LengthKind.NORMAL, 64, 1, 96, "normal:64:8"),
    ("normal:100:0", LengthKind.NORMAL, 100, 1, 100, "normal:100:0"),
], ids=["n", "fixed", "uniform", "normal", "normal-no-spread"])
def test_parse_length(text, kind, mean, low, high, back):
    dist = parse_length(text)
    assert (dist.kind, dist.mean, dist.low, dist.high) == (kind, mean, low, high)
    assert str(dist) == back and parse_length(str(dist)) == dist


@pytest.mark.parametrize(("text", "match"), [
    ("0", ">= 1 token"), ("-3", ">= 1 token"), ("uniform:20:10", "LOW <= HIGH"),
    ("uniform:0:10", "LOW <= HIGH"), ("uniform:1.5:10", "not a whole number"),
    ("normal:0:1", "MEAN >= 1"), ("normal:10:-1", "STD >= 0"), ("normal:inf:1", "MEAN >= 1"),
    ("normal:a:1", "is not N"), ("gamma:1:2", "is not N"), ("uniform:3", "is not N"),
    ("abc", "is not N"), ("fixed:1:2", "is not N"),
], ids=["zero", "negative", "low-above-high", "low-zero", "float-uniform", "mean-zero",
        "negative-std", "infinite-mean", "not-a-number", "unknown-kind", "uniform-one-number",
        "word", "fixed-two-numbers"])
def test_bad_lengths(text, match):
    with pytest.raises(WorkloadError, match=match):
        parse_length(text)


def test_samples_follow_the_distribution():
    rng = np.random.default_rng(0)
    uniform = [parse_length("uniform:10:20").sample(rng) for _ in range(5000)]
    assert min(uniform) == 10 and max(uniform) == 20
    assert np.std(uniform) == pytest.approx(parse_length("uniform:10:20").std, rel=0.05)
    normal = [parse_length("normal:100:10").sample(rng) for _ in range(5000)]
    assert np.mean(normal) == pytest.approx(100, abs=1) and np.std(normal) == pytest.approx(
        10, rel=0.05)
    assert all(isinstance(x, int) for x in uniform + normal)


class _Draws:
    """A generator stand-in whose normal draws are given."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def normal(self, mean: float, std: float) -> float:
        return self.values.pop(0)


def test_normal_is_rounded_and_clipped_to_one_and_to_mean_plus_four_std():
    wide = LengthDist.normal(2, 50)
    assert (wide.low, wide.high) == (1, 202)  # ceil(2 + 4 * 50)
    draws = _Draws(-30.0, 0.4, 7.6, 1e9)
    assert [wide.sample(draws) for _ in range(4)] == [1, 1, 8, 202]
    rng = np.random.default_rng(1)
    samples = [wide.sample(rng) for _ in range(500)]
    assert min(samples) == 1 and max(samples) <= 202


def test_fixed_draws_nothing():
    rng = np.random.default_rng(3)
    before = rng.bit_generator.state
    assert LengthDist.fixed(9).sample(rng) == 9 and rng.bit_generator.state == before
