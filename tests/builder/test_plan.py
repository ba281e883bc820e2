"""Golden argv of the trtllm-0.21 build pipelines per phase / profile / TP, and plan facts."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from buildspecs import variant, write_spec

from pdtrt.blueprint.steps import StepKind
from pdtrt.builder.plan import plan_build
from pdtrt.enums import Phase
from pdtrt.spec.load import load_deployment


def _seed(d):
    pass


def _fp8_weights(d):
    d["model"]["weights"] = "fp8"


def _a100_l4_int8(d):
    d["model"]["weights"] = "int8-wo"
    d["model"]["kv_cache_dtype"] = "bf16"
    d["prefill"]["gpu"] = "a100-sxm"
    d["decode"]["gpu"] = "l4"


def _tp2_prefill(d):
    d["prefill"]["tp"] = 2


def _generic_profiles(d):  # A10G has no profile of its own
    d["model"]["kv_cache_dtype"] = "bf16"
    d["prefill"]["gpu"] = "a10g"
    d["decode"]["gpu"] = "a10g"
    d["workload"] = {"isl": 1000, "osl": 200}
    for pool in ("prefill", "decode"):
        d[pool]["engine"] = {"tokens_per_block": 32}


CASES = {
    "seed-h100-l40s-fp8kv": _seed,
    "fp8-weights-h100-l40s": _fp8_weights,
    "int8wo-a100-l4": _a100_l4_int8,
    "tp2-prefill": _tp2_prefill,
    "generic-a10g": _generic_profiles,
}


def _plan(tmp_path, edit, monkeypatch):
    monkeypatch.delenv("PDTRT_TRTLLM_EXAMPLES", raising=False)
    dep = load_deployment(write_spec(tmp_path, variant(edit)))
    return plan_build(dep, engines_root=Path("engines"))


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_golden_argv(case, tmp_path, monkeypatch, golden):
    plan = _plan(tmp_path, CASES[case], monkeypatch)
    text = "".join(f"# {s.name} (on {s.gpu.key}, compute {s.gpu.compute_capability})\n"
                   f"{shlex.join(s.argv)}\n\n" for s in plan.steps)
    golden(f"build/{case}.txt", text)


def test_seed_plan_facts(tmp_path, monkeypatch):
    plan = _plan(tmp_path, _seed, monkeypatch)
    assert [s.name for s in plan.steps] == [
        "prefill-quantize", "prefill-trtllm-build", "decode-quantize", "decode-trtllm-build"]
    pre, dec = plan.phase(Phase.PREFILL), plan.phase(Phase.DECODE)
    assert (pre.settings.profile, dec.settings.profile) == ("h100-prefill", "l40s-decode")
    assert pre.gpu.compute_capability == "9.0" and dec.gpu.compute_capability == "8.9"
    assert str(dec.engine_dir) == "engines/llama3-8b-h100-l40s-trtllm-0.21/decode"
    batch = dec.settings.values["max_batch_size"]
    assert (batch.value, batch.source) == (92, "computed")  # spec omits it on purpose
    assert "KV capacity" in batch.why
    assert plan.notes and "model.path is not set" in plan.notes[0]


def test_fp8_weights_switch_gemm_plugin_off(tmp_path, monkeypatch):
    plan = _plan(tmp_path, _fp8_weights, monkeypatch)
    s = plan.phase(Phase.PREFILL).settings
    assert s["gemm_plugin"] == "disable" and s.values["gemm_plugin"].source == "computed"
    assert s["use_fp8_context_fmha"] == "enable"  # Hopper + FP8 weights: kept from the profile
    assert plan.steps[0].kind is StepKind.QUANTIZE and "fp8" in plan.steps[0].argv


def test_phase_subset_and_examples_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PDTRT_TRTLLM_EXAMPLES", "/src/trtllm/examples")
    dep = load_deployment(write_spec(tmp_path, variant(_seed)))
    plan = plan_build(dep, engines_root=tmp_path / "e", phases=(Phase.DECODE,))
    assert [s.name for s in plan.steps] == ["decode-quantize", "decode-trtllm-build"]
    assert plan.steps[0].argv[1] == "/src/trtllm/examples/quantization/quantize.py"


def test_reference_plan_has_no_argv(tmp_path):
    from conftest import EXAMPLES

    plan = plan_build(load_deployment(EXAMPLES / "reference-cpu.yaml"), engines_root=tmp_path)
    assert [(s.name, s.argv) for s in plan.steps] == [
        ("tokenizer", ()), ("prefill-checkpoint", ()), ("decode-checkpoint", ())]
    assert "gemm_plugin" not in plan.phase(Phase.PREFILL).settings.values

