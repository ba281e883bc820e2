"""The accuracy claims of docs/design/planning.md, guarded: the shipped TensorRT-LLM factors
reproduce the measured sample within the stated bounds, without a client-overhead constant, and the
numbers written into the factors file are what the model really gives."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdtrt.enums import ServingBackend
from pdtrt.perf.calibrate import CalibrationFit, SampleDeployment, predict, read_rows
from pdtrt.perf.factors import load_factors
from tests.conftest import ROOT

DATA = ROOT / "pdtrt" / "data" / "calibration" / "measured_calibration.csv"
FACTORS = ROOT / "pdtrt" / "data" / "perf_factors.yaml"
# The done-criteria of issue 17 (docs/design/planning.md section 2): in-sample bounds. The worst
# prediction was bounded at 3x until issue 30: with prompts batched per step as TensorRT-LLM
# batches them, the sample's 128-client TP4/TP8 rows (TTFT 3-4x their 64-client value at any
# TP; no engine term explains it) are 4x off, and forcing them to 3x made the fit quadruple
# the launch overhead, off every check outside the sample (docs/design/planning.md section 2).
TPOT_MAPE_MAX, TTFT_MAPE_MAX, WORST_RATIO_MAX = 0.12, 0.25, 4.5


@pytest.fixture(scope="module")
def shipped():
    import yaml

    return yaml.safe_load(FACTORS.read_text())["backends"]["trtllm"]


@pytest.fixture(scope="module")
def sample_fit(catalog, shipped):
    from pdtrt.facts.model import load_model_facts

    model = load_model_facts("Qwen/Qwen3-32B")
    f = load_factors(ServingBackend.TRTLLM)
    sample = SampleDeployment(**shipped["sample"])
    rows = tuple(r for r in read_rows(DATA) if r.backend is ServingBackend.TRTLLM)
    preds = tuple(predict(r, model, catalog, f, sample) for r in rows)
    return CalibrationFit(backend=ServingBackend.TRTLLM, factors=f, rows=rows,
                          predicted_ms=preds, evaluations=0)


def test_trtllm_uses_kernel_curves_and_no_client_constant():
    f = load_factors(ServingBackend.TRTLLM)
    assert f.kernels is not None
    assert f.request_overhead_s == 0.0  # the harness's HTTP overhead is not engine time


def test_in_sample_accuracy_bounds(sample_fit):
    assert sample_fit.tpot_mape <= TPOT_MAPE_MAX
    assert sample_fit.ttft_mape <= TTFT_MAPE_MAX
    assert sample_fit.max_ratio <= WORST_RATIO_MAX


def test_recorded_fit_is_what_the_model_gives(sample_fit, shipped):
    s = sample_fit.summary()
    for key in ("rows", "ttft_mape", "tpot_mape", "max_ratio"):
        assert s[key] == pytest.approx(shipped["fit"][key], abs=2e-3), key


def test_validation_covers_tp_clients_and_versions(shipped):
    groups = shipped["validation"]["groups"]
    assert {g["by"] for g in groups} == {"tp", "clients", "version"}
    assert {g["value"] for g in groups if g["by"] == "tp"} == {"1", "2", "4", "8"}
    assert sum(g["rows"] for g in groups if g["by"] == "tp") == 180
    assert all(0 < g["ttft_mape"] < 1 and 0 < g["tpot_mape"] < 1 for g in groups)


def test_estimates_carry_the_nearest_error_band(catalog):
    from pdtrt.enums import KVDType, ServingMode, WeightQuant
    from pdtrt.facts.model import load_model_facts
    from pdtrt.perf.estimate import Load, ServingConfig, estimate
    from pdtrt.perf.hardware import Instance

    f = load_factors(ServingBackend.TRTLLM)
    model = load_model_facts("Qwen/Qwen3-32B")
    inst = Instance(model=model, gpu=catalog.get("h100-sxm"), tp=4, weights=WeightQuant.FP8,
                    kv_dtype=KVDType.FP8)
    est = estimate(ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst),
                   Load(isl=2048, osl=256, concurrency=48), f)
    band = est.error_band
    assert band is not None and "tp 4" in band.regime and "clients 32-64" in band.regime
    assert band.caveat is None
    groups = {(g.by, g.value): g for g in f.validation.groups}
    assert band.ttft_mape == max(groups[("tp", "4")].ttft_mape,
                                 groups[("clients", "32-64")].ttft_mape)
    l40s = estimate(ServingConfig(mode=ServingMode.AGGREGATED,
                                  prefill=replace(inst, gpu=catalog.get("l40s"),
                                                  weights=WeightQuant.NONE)),
                    Load(isl=2048, osl=256, rate_per_s=0.5), f)
    assert "l40s" in l40s.error_band.caveat
