"""benchmarks/published_points.py and its data file: the file is well formed, its engine limits
are the ones the stated trtllm-bench rule gives, and the script's core runs on a point.

The error against the published numbers is reported (benchmarks/published_points.md), never
asserted here: the published points are a check on the model, not a target it is tuned to.
"""

from __future__ import annotations

import math

import pytest

from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.model import load_model_facts
from pdtrt.perf.factors import load_factors
from tests.benchmarks.conftest import load_script

published_points = load_script("published_points")



@pytest.fixture(scope="module")
def points():
    return published_points.load_points()


def test_every_point_is_well_formed(points):
    catalog = load_catalog()
    assert len(points) >= 40
    keys = set()
    for p in points:
        catalog.get(p.gpu)  # raises for a GPU the catalog lacks
        assert load_model_facts(p.model).tp_problem(p.tp) is None
        assert p.source.url.startswith("https://github.com/NVIDIA/TensorRT-LLM/blob/")
        assert p.source.commit in p.source.url
        assert p.published_tok_per_s > 0 and p.isl + p.osl > 2
        keys.add((p.source.key, p.model, p.gpu, p.tp, p.quant, p.isl, p.osl))
    assert len(keys) == len(points), "a point is listed twice"


def test_engine_limits_are_the_trtllm_bench_rule(points):
    catalog = load_catalog()
    for p in points:
        limits = published_points.trtllm_bench_limits(
            load_model_facts(p.model), catalog.get(p.gpu), tp=p.tp, quant=p.quant,
            isl=p.isl, osl=p.osl)
        assert limits == (p.max_batch_size, p.max_num_tokens), p.label


def test_the_rule_on_a_hand_computed_case():
    # Llama-3.1-8B FP8 on one 80 GiB H100, 128/128: (80 - 8.03e9 B) x 0.95 of KV at
    # 64 KiB a token holds ~4,300 sequences of 256 tokens -> capped at 4096; x (1 + 1) tokens.
    limits = published_points.trtllm_bench_limits(
        load_model_facts("meta-llama/Meta-Llama-3.1-8B"), load_catalog().get("h100-sxm"),
        tp=1, quant="fp8", isl=128, osl=128)
    assert limits == (4096, 8192)


def test_the_core_runs_on_one_point(points):
    point = next(p for p in points if p.gpu == "h100-sxm" and p.isl == 128 and p.osl == 128)
    check = published_points.check_point(point, load_factors(), load_catalog())
    assert math.isfinite(check.predicted_tok_per_s) and check.predicted_tok_per_s > 0
    assert check.error == pytest.approx(
        check.predicted_tok_per_s / point.published_tok_per_s - 1)
    summary = published_points.summarise([check])
    assert summary["points"] == 1 and summary["mean_abs_error"] == pytest.approx(abs(check.error))


def test_a_per_gpu_metric_counts_every_gpu(points):
    p = next(p for p in points if p.source.metric == "output_tok_per_s_per_gpu")
    assert p.published_tok_per_s == pytest.approx(p.published * p.tp)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("quant: fp8", "quant: int4", 1), "quant must be one of"),
    (lambda t: t.replace("num_requests: 30000", "num_requests: 0", 1), "num_requests must be"),
    (lambda t: t.replace("tp: 1,", "tp: 1, typo: 1,", 1), "unknown ['typo']"),
    (lambda t: t.replace("source: trtllm-0.17", "source: nowhere", 1), "unknown source"),
], ids=["quant", "requests", "unknown-key", "source"])
def test_a_malformed_file_is_refused(tmp_path, edit, message):
    text = published_points.DATA.read_text(encoding="utf-8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(edit(text), encoding="utf-8")
    with pytest.raises(published_points.DataError, match=message.replace("[", r"\[")):
        published_points.load_points(bad)
