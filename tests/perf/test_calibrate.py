"""Calibration: reading the measured CSV, the optimiser, the fitted factors file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdtrt.enums import ServingBackend
from pdtrt.errors import CatalogError
from pdtrt.perf.calibrate import (
    CalibrationFit,
    gpu_model_tp_groups,
    nelder_mead,
    predict,
    read_rows,
)
from pdtrt.perf.factors import DEFAULT_FACTORS, EfficiencyFactors, load_factors, load_factors_file

DATA = Path(__file__).resolve().parents[2] / "pdtrt" / "data" / "calibration" / \
    "measured_calibration.csv"


def test_read_rows_of_the_measured_sample():
    rows = read_rows(DATA)
    assert len(rows) == 357
    by = {b: sum(r.backend is b for r in rows) for b in ServingBackend}
    assert by == {ServingBackend.TRTLLM: 180, ServingBackend.VLLM: 93, ServingBackend.SGLANG: 84}
    first = rows[0]
    assert (first.isl, first.osl, first.concurrency, first.tp, first.fp8) == (1024, 128, 16, 2,
                                                                              False)


def test_gpu_model_tp_groups_partition_the_rows():
    rows = [r for r in read_rows(DATA) if r.backend is ServingBackend.TRTLLM]
    groups = gpu_model_tp_groups(rows, "Qwen/Qwen3-32B")
    assert [g[1] for g in groups] == [f"h100_sxm Qwen/Qwen3-32B tp{tp}" for tp in (1, 2, 4, 8)]
    counts = [sum(g[4](r) for r in rows) for g in groups]
    assert counts == [43, 45, 46, 46] and sum(counts) == len(rows)


def test_bad_csv_row_is_located(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(DATA.read_text().splitlines()[0] + "\nQwen/Qwen3-32B,h100_sxm,trtllm,1,agg,"
                   "fp8,fp8,x,128,8,1,1,100,10\n")
    with pytest.raises(CatalogError, match=r"bad.csv:2: bad calibration row"):
        read_rows(bad)


def test_nelder_mead_finds_a_quadratic_minimum():
    x, value, evals = nelder_mead(lambda v: float(((v - np.array([1.0, -2.0])) ** 2).sum()),
                                  np.zeros(2), max_evals=400)
    assert np.allclose(x, [1.0, -2.0], atol=1e-2) and value < 1e-4 and evals <= 410


def test_predictions_move_with_the_factors(catalog):
    from pdtrt.facts.model import load_model_facts

    row = next(r for r in read_rows(DATA) if r.backend is ServingBackend.TRTLLM)
    model = load_model_facts("Qwen/Qwen3-32B")
    fast = predict(row, model, catalog, DEFAULT_FACTORS)
    slow = predict(row, model, catalog, EfficiencyFactors(
        gemm_eff=0.2, attention_eff=0.2, bandwidth_eff=0.4, step_overhead_s=1e-3,
        allreduce_latency_s=5e-5))
    assert slow[0] > fast[0] and slow[1] > fast[1]
    fit = CalibrationFit(backend=ServingBackend.TRTLLM, factors=DEFAULT_FACTORS, rows=(row,),
                         predicted_ms=((row.ttft_ms * 1.1, row.tpot_ms * 0.8),), evaluations=1)
    assert fit.ttft_mape == pytest.approx(0.1) and fit.tpot_mape == pytest.approx(0.2)


def test_builtin_factors_are_fitted_and_documented():
    import yaml

    text = (DATA.parent.parent / "perf_factors.yaml").read_text()
    data = yaml.safe_load(text)
    assert data["source"]["command"].startswith("python scripts/calibrate.py")
    for backend in ServingBackend:
        fit = data["backends"][backend.value]["fit"]
        assert fit["ttft_mape"] < 0.5 and fit["tpot_mape"] < 0.3
        assert load_factors(backend) != DEFAULT_FACTORS


def test_factors_file_errors(tmp_path):
    f = tmp_path / "f.yaml"
    f.write_text("backends:\n  tensorrt: {factors: {}}\n")
    with pytest.raises(CatalogError, match="unknown backend 'tensorrt'"):
        load_factors_file(f)
    f.write_text("backends:\n  trtllm: {factors: {gemm_eff: 2, attention_eff: 0.5, "
                 "bandwidth_eff: 0.5, step_overhead_s: 0, allreduce_latency_s: 0}}\n")
    with pytest.raises(CatalogError, match=r"gemm_eff must be in \(0, 1\]"):
        load_factors_file(f)
    f.write_text("backends:\n  trtllm: {factors: {speed: 1}}\n")
    with pytest.raises(CatalogError, match="unknown factors"):
        load_factors_file(f)
    with pytest.raises(CatalogError, match="cannot read factors file"):
        load_factors_file(tmp_path / "missing.yaml")


def test_calibrate_script_end_to_end(tmp_path):
    import subprocess
    import sys

    import yaml

    lines = DATA.read_text().splitlines()
    trt = [line for line in lines[1:] if ",trtllm,1.0.0rc3," in line]
    small = tmp_path / "small.csv"
    small.write_text("\n".join([lines[0], *trt[::40]]) + "\n")  # 5 rows
    out, res = tmp_path / "f.yaml", tmp_path / "r.csv"
    script = DATA.parents[3] / "scripts" / "calibrate.py"
    done = subprocess.run([sys.executable, str(script), "--data", str(small), "-o", str(out),
                           "--residuals", str(res), "--max-evals", "12", "--logo-evals", "4",
                           "--backend", "trtllm"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| trtllm | 5 |" in done.stdout
    fitted = load_factors_file(out)[ServingBackend.TRTLLM]
    assert fitted != DEFAULT_FACTORS
    entry = yaml.safe_load(out.read_text())["backends"]["trtllm"]
    assert entry["fit"]["rows"] == 5 and entry["kernels"] == "builtin"
    assert {g["by"] for g in entry["validation"]["groups"]} <= {"tp", "clients", "version"}
    assert "leave-one-group-out" in done.stdout
    assert len(res.read_text().splitlines()) == 6


def test_logo_cv_script_holds_out_each_gpu_model_tp_group(tmp_path):
    import json
    import subprocess
    import sys

    lines = DATA.read_text().splitlines()
    trt = [line for line in lines[1:] if ",trtllm,1.0.0rc3," in line]
    small = tmp_path / "small.csv"
    tp_column = lines[0].split(",").index("tp_size")
    picked = [next(line for line in trt if float(line.split(",")[tp_column]) == tp)
              for tp in (1, 2, 4, 8)]
    small.write_text("\n".join([lines[0], *picked]) + "\n")  # one row per TP
    script = DATA.parents[3] / "scripts" / "logo_cv.py"
    done = subprocess.run([sys.executable, str(script), "--data", str(small), "--evals", "1",
                           "--group", "3", "--json"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert [(r["variant"], r["group"], r["rows"]) for r in results] == [
        ("before", "h100_sxm Qwen/Qwen3-32B tp8", 1), ("after", "h100_sxm Qwen/Qwen3-32B tp8", 1)]
    before, after = results
    assert before["candidate_s"] == 0 and after["candidate_s"] > 0  # only "after" fits it
    assert after["candidate"] == "tp_sync_layer_s"
    assert before["held_out"]["ttft_mape"] >= 0 and "ttft_mape" in before["in_sample"]
