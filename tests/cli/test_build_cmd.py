"""pdtrt build and pdtrt engines check on the command line."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from conftest import EXAMPLES

from pdtrt.blueprint.manifest import read_manifest, write_manifest
from pdtrt.enums import KVDType

SEED = str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
REF = str(EXAMPLES / "reference-cpu.yaml")


def test_dry_run_prints_both_pipelines(run, monkeypatch):
    monkeypatch.delenv("PDTRT_TRTLLM_EXAMPLES", raising=False)
    result = run("build", SEED, "--dry-run")
    assert result.exit_code == 0, result.output
    out = result.stdout
    name = "llama3-8b-h100-l40s-trtllm-0.21"
    assert out.startswith(f"build plan: {name} (target trtllm-0.21, run inside "
                          "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3)\n")
    assert "  step 1: prefill-quantize on a h100-sxm (compute 9.0) -> engines/" \
           f"{name}/checkpoints/prefill/\n" in out
    assert "  step 4: decode-trtllm-build on a l40s (compute 8.9) -> engines/" \
           f"{name}/decode/\n" in out
    assert f"    $ trtllm-build --checkpoint_dir engines/{name}/checkpoints/decode " \
           f"--output_dir engines/{name}/decode --max_batch_size 92 " in out
    assert "  max_batch_size          92       computed: KV capacity" in out


@pytest.mark.parametrize("example", ["llama3-8b-h100-l40s-trtllm-0.21", "llama3-8b-h100-l40s",
                                     "reference-cpu"])
def test_golden_dry_run_output(example, run, monkeypatch, golden):
    monkeypatch.delenv("PDTRT_TRTLLM_EXAMPLES", raising=False)
    monkeypatch.chdir(EXAMPLES.parent.parent)  # the per-host commands name the spec as given
    result = run("build", f"docs/examples/{example}.yaml", "--dry-run")
    assert result.exit_code == 0, result.output
    golden(f"build/dry-run-{example}.txt", result.stdout)


def test_dry_run_json_phase_and_engines_dir(run, tmp_path):
    result = run("build", SEED, "--dry-run", "--json", "--phase", "decode",
                 "--engines-dir", str(tmp_path))
    data = json.loads(result.stdout)
    assert data["dry_run"] is True
    assert [s["name"] for s in data["plan"]["steps"]] == ["decode-quantize",
                                                          "decode-trtllm-build"]
    step = data["plan"]["steps"][1]
    assert step["argv"][0] == "trtllm-build" and step["gpu"] == {"key": "l40s",
                                                                 "compute_capability": "8.9"}
    assert step["output_dir"] == f"{tmp_path}/llama3-8b-h100-l40s-trtllm-0.21/decode"
    settings = data["plan"]["phases"][0]["settings"]
    assert settings["max_batch_size"]["source"] == "computed"
    assert data["hosts"] == [{"gpu": "l40s", "compute_capability": "8.9", "phases": ["decode"],
                              "steps": [1, 2], "args": ["--phase", "decode"]}]


def test_dry_run_says_what_each_build_host_runs(run, tmp_path):
    result = run("build", SEED, "--dry-run", "--engines-dir", str(tmp_path))
    tail = result.stdout.splitlines()[-6:]
    assert tail[0] == ("hosts: each engine is built on its own GPU type, inside "
                       "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3 (docs/build.md):")
    assert tail[1:5] == [
        "  h100-sxm host (compute 9.0): steps 1-2 (prefill)",
        f"    $ pdtrt build {SEED} --engines-dir {tmp_path} --phase prefill",
        "  l40s host (compute 8.9): steps 3-4 (decode)",
        f"    $ pdtrt build {SEED} --engines-dir {tmp_path} --phase decode"]
    assert tail[5].endswith(f"`pdtrt engines check {SEED} --engines-dir {tmp_path}`")
    reference = run("build", REF, "--dry-run").stdout
    assert "hosts:" not in reference  # built here, in-process


def test_real_run_refuses_without_the_gpu_and_force_reaches_the_toolchain(run, tmp_path):
    refused = run("build", SEED, "--engines-dir", str(tmp_path))
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: TensorRT engines only load on the GPU "
                                     "architecture they were built on:")
    forced = run("build", SEED, "--engines-dir", str(tmp_path), "--force")
    assert forced.exit_code == 2
    assert "the TensorRT-LLM toolchain does not match the target" in forced.stderr
    assert not (tmp_path / "llama3-8b-h100-l40s-trtllm-0.21" / "prefill").exists()


def test_reference_build_resumes(run, reference_engines):
    root, _ = reference_engines
    result = run("build", REF, "--engines-dir", str(root))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        "skipped tokenizer (outputs exist for unchanged inputs)",
        "skipped prefill-checkpoint (outputs exist for unchanged inputs)",
        "skipped decode-checkpoint (outputs exist for unchanged inputs)"]
    data = json.loads(run("build", REF, "--engines-dir", str(root), "--json").stdout)
    assert [s["status"] for s in data["result"]["steps"]] == ["skipped"] * 3


def test_engines_check_pass_and_fail(run, reference_engines, tmp_path):
    root, dep = reference_engines
    ok = run("engines", "check", REF, "--engines-dir", str(root))
    assert ok.exit_code == 0 and ok.stdout.endswith("ok: compatible\n")
    bad = tmp_path / dep.spec.name
    shutil.copytree(root / dep.spec.name, bad, symlinks=True)
    m = read_manifest(bad / "decode")
    write_manifest(bad / "decode", m.model_copy(update={
        "kv_layout": dataclasses.replace(m.kv_layout, kv_dtype=KVDType.BF16)}))
    result = run("engines", "check", str(bad))
    assert result.exit_code == 2
    assert "problem: " in result.stdout and "kv_dtype prefill fp32 != decode bf16" in \
        result.stdout
    assert result.stdout.endswith("incompatible: 1 problem(s)\n")
    data = json.loads(run("engines", "check", str(bad), "--json", "--here").stdout)
    assert data["ok"] is False and len(data["engines"]) == 2


def test_engines_check_bad_argument(run, tmp_path):
    result = run("engines", "check", str(tmp_path))
    assert result.exit_code == 2
    assert "not a spec, an engine directory" in result.stderr


def test_rejected_plan_exits_2_with_every_reason(run, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text((EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text().replace(
        "    max_num_tokens: 16384\n", "    max_num_tokens: 2048\n"))
    result = run("build", str(spec), "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: build rejected:\n  - prefill: max_num_tokens 2048 "
                                    "< max_input_len 4096 while paged context FMHA is off")
    data = json.loads(run("build", str(spec), "--dry-run", "--json").stdout)
    assert data["error"] == "BuildRejected" and len(data["reasons"]) == 1
