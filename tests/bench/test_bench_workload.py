"""Length distributions, seeded per-request workloads, JSONL datasets, records CSV."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.bench import (
    LengthKind,
    RequestRecord,
    Workload,
    load_dataset,
    parse_length,
    read_csv,
    write_csv,
)
from pdtrt.client.types import ErrorKind
from pdtrt.errors import BenchError


@pytest.mark.parametrize(("text", "kind", "mean"), [
    ("128", LengthKind.FIXED, 128), ("fixed:7", LengthKind.FIXED, 7),
    ("uniform:10:20", LengthKind.UNIFORM, 15), ("normal:64:8", LengthKind.NORMAL, 64),
])
def test_parse_length(text, kind, mean):
    dist = parse_length(text)
    assert dist.kind is kind and dist.mean == mean


@pytest.mark.parametrize(("text", "match"), [
    ("0", ">= 1 token"), ("uniform:20:10", "LOW <= HIGH"), ("normal:0:1", "MEAN >= 1"),
    ("gamma:1:2", "is not N"), ("uniform:3", "is not N"), ("abc", "is not N"),
])
def test_bad_lengths(text, match):
    with pytest.raises(BenchError, match=match):
        parse_length(text)


def test_samples_follow_the_distribution():
    rng = np.random.default_rng(0)
    uniform = [parse_length("uniform:10:20").sample(rng) for _ in range(5000)]
    assert min(uniform) == 10 and max(uniform) == 20
    normal = [parse_length("normal:100:10").sample(rng) for _ in range(5000)]
    assert np.mean(normal) == pytest.approx(100, abs=1) and np.std(normal) == pytest.approx(
        10, rel=0.05)
    assert min(parse_length("normal:2:50").sample(rng) for _ in range(200)) == 1  # the floor


def test_request_i_is_seeded_per_index():
    w = Workload(isl=parse_length("uniform:5:50"), osl=parse_length("uniform:1:9"), seed=3)
    a = w.request(4)
    assert a == w.request(4) and a != w.request(5)
    assert a != Workload(isl=w.isl, osl=w.osl, seed=4).request(4)
    assert len(a.prompt.split()) == a.input_tokens and 5 <= a.input_tokens <= 50


def test_dataset_cycles_and_keeps_its_max_tokens(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a b c", "max_tokens": 5}\n\n{"prompt": "d"}\n')
    w = Workload(isl=parse_length("1"), osl=parse_length("9"), dataset=load_dataset(path))
    got = [(w.request(i).prompt, w.request(i).max_tokens, w.request(i).input_tokens)
           for i in range(3)]
    assert got == [("a b c", 5, 3), ("d", 9, 1), ("a b c", 5, 3)]


@pytest.mark.parametrize(("text", "match"), [
    ("not json\n", r"p.jsonl:1: not JSON"),
    ('{"prompt": "ok"}\n{"text": "x"}\n', r"p.jsonl:2: needs a non-empty string 'prompt'"),
    ('{"prompt": "x", "max_tokens": 0}\n', "'max_tokens' must be an integer >= 1"),
    ("\n", "has no prompts"),
], ids=["not-json", "no-prompt", "bad-max-tokens", "empty"])
def test_bad_datasets(tmp_path, text, match):
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(BenchError, match=match):
        load_dataset(path)
    with pytest.raises(BenchError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl")


def test_records_csv_round_trip(tmp_path):
    records = [
        RequestRecord(index=0, model="m", request_id="r0", warmup=False, scheduled_s=0.5,
                      send_s=0.501, token_times_s=(0.6, 0.61), end_s=0.62, input_tokens=3,
                      max_tokens=2),
        RequestRecord(index=-1, model="m", request_id="w", warmup=True, scheduled_s=None,
                      send_s=-1.0, token_times_s=(), end_s=-0.5, input_tokens=3, max_tokens=2,
                      error="bad, \"quoted\"", error_kind=ErrorKind.REQUEST),
    ]
    path = write_csv(records, tmp_path / "r.csv")
    assert read_csv(path) == records
