"""Running trtllm-0.21 builds against fake tools: argv, resume, failure cleanup, GPU refusal."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from buildspecs import fake_hf_checkpoint, variant, write_spec
from fake_trtllm import install_fake_tools
from fakes import FakeNVML

from pdtrt.blueprint.manifest import read_manifest
from pdtrt.builder.plan import plan_build
from pdtrt.builder.run import StepStatus, run_build
from pdtrt.enums import Phase
from pdtrt.errors import BuildError, GPUMismatchError, ToolchainError
from pdtrt.spec.load import load_deployment
from pdtrt.targets import toolchain

H100 = ("NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0))
L40S = ("NVIDIA L40S", 48_305_799_168, (8, 9))
A100 = ("NVIDIA A100-SXM4-80GB", 85_899_345_920, (8, 0))


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Fake tools on PATH, a fake HF checkpoint, TensorRT-LLM 0.21.0 'installed'."""
    bin_dir, examples = install_fake_tools(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PDTRT_TRTLLM_EXAMPLES", str(examples))
    monkeypatch.setenv("FAKE_TRTLLM_RECORD", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("CUDA_VERSION", "12.9.0")
    monkeypatch.setattr(toolchain, "dist_version",
                        lambda d: {"tensorrt_llm": "0.21.0", "tensorrt": "10.11.0.33"}.get(d))
    fake_hf_checkpoint(tmp_path)
    return tmp_path


def _deployment(tmp, edit=lambda d: None):
    def with_path(d):
        d["model"]["path"] = str(tmp / "hf")
        edit(d)
    return load_deployment(write_spec(tmp, variant(with_path)))


def _build(tmp, dep, nvml, **kw):
    plan = plan_build(dep, engines_root=tmp / "engines")
    return plan, run_build(plan, dep, nvml=nvml, **kw)


def _recorded(tmp):
    path = tmp / "argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_builds_both_phases_and_writes_manifests(env):
    dep = _deployment(env)
    plan, result = _build(env, dep, FakeNVML([H100, L40S]))
    assert [r.status for r in result.steps] == [StepStatus.RAN] * 4
    recorded = _recorded(env)
    assert [r[0] for r in recorded] == ["quantize.py", "trtllm-build"] * 2
    assert recorded[1][1:] == list(plan.steps[1].argv[1:])  # the exact rendered argv ran
    for phase, gpu in ((Phase.PREFILL, H100), (Phase.DECODE, L40S)):
        m = read_manifest(env / "engines" / dep.spec.name / str(phase))
        assert (m.phase, m.gpu_name, m.compute_capability) == (phase, gpu[0], ".".join(
            map(str, gpu[2])))
        assert m.versions == {"tensorrt_llm": "0.21.0", "tensorrt": "10.11.0.33",
                              "cuda": "12.9.0"}
        assert m.kv_layout.kv_dtype == "fp8" and m.kv_layout.num_layers == 32
        assert set(m.input_hashes) == {f"{phase}-quantize", f"{phase}-trtllm-build"}
        assert m.build_settings["settings"]["max_batch_size"]["source"] in ("spec", "computed")
    assert (env / "engines" / dep.spec.name / "logs" / "decode-trtllm-build.log").read_text(
        ).startswith("$ trtllm-build --checkpoint_dir")


def test_built_engines_pass_engines_check(env):
    from pdtrt.builder.check import check_engines

    dep = _deployment(env)
    _build(env, dep, FakeNVML([H100, L40S]))
    report = check_engines([dep.source], engines_root=env / "engines")
    assert report.ok, report.problems  # manifests agree with each other and the config.json
    assert check_engines([dep.source], engines_root=env / "engines", here=True,
                         nvml=FakeNVML([H100])).problems == [
        f"{env}/engines/llama3-8b-h100-l40s-trtllm-0.21/decode: needs a GPU of compute 8.9 "
        "(NVIDIA L40S); this machine has: NVIDIA H100 80GB HBM3 (compute 9.0)"]


def test_resume_skips_unchanged_steps(env):
    dep = _deployment(env)
    _build(env, dep, FakeNVML([H100, L40S]))
    _, again = _build(env, dep, FakeNVML([H100, L40S]))
    assert [r.status for r in again.steps] == [StepStatus.SKIPPED] * 4
    changed = _deployment(env, lambda d: d["prefill"]["engine"].update(max_batch_size=16))
    _, third = _build(env, changed, FakeNVML([H100, L40S]))
    assert [r.status for r in third.steps] == [StepStatus.SKIPPED, StepStatus.RAN,
                                               StepStatus.SKIPPED, StepStatus.SKIPPED]
    assert len(_recorded(env)) == 5


def test_failure_removes_partial_outputs_and_names_the_log(env, monkeypatch):
    dep = _deployment(env)
    monkeypatch.setenv("FAKE_TRTLLM_FAIL", "trtllm-build")
    with pytest.raises(BuildError) as err:
        _build(env, dep, FakeNVML([H100, L40S]))
    engine_dir = env / "engines" / dep.spec.name / "prefill"
    assert not engine_dir.exists()  # partial.bin was removed with the directory
    assert "step prefill-trtllm-build failed with exit status 1" in err.value.message
    assert "RuntimeError: fake failure" in err.value.message
    monkeypatch.delenv("FAKE_TRTLLM_FAIL")
    _, result = _build(env, dep, FakeNVML([H100, L40S]))  # resumes after the checkpoint
    assert result.steps[0].status is StepStatus.SKIPPED
    assert result.steps[1].status is StepStatus.RAN


def test_a_finished_phase_keeps_its_manifest_when_a_later_one_fails(env, monkeypatch):
    dep = _deployment(env)
    monkeypatch.setenv("FAKE_TRTLLM_FAIL", "trtllm-build@decode")
    with pytest.raises(BuildError, match="step decode-trtllm-build failed"):
        _build(env, dep, FakeNVML([H100, L40S]))
    root = env / "engines" / dep.spec.name
    assert read_manifest(root / "prefill").phase is Phase.PREFILL
    assert not (root / "decode").exists()
    assert (root / "checkpoints" / "decode" / "rank0.safetensors").exists()


def test_refuses_a_gpu_of_another_architecture(env):
    dep = _deployment(env)
    with pytest.raises(GPUMismatchError) as err:
        _build(env, dep, FakeNVML([A100]))
    assert ("prefill engine is for h100-sxm (compute 9.0), this machine has: NVIDIA "
            "A100-SXM4-80GB (compute 8.0)") in err.value.message
    assert "--force" in err.value.hint
    assert _recorded(env) == []  # nothing ran


def test_no_driver_is_a_refusal_too(env):
    with pytest.raises(GPUMismatchError, match="no NVIDIA driver"):
        _build(env, _deployment(env), FakeNVML(init_error="NVML Shared Library Not Found"))


def test_force_builds_for_the_local_gpu(env):
    dep = _deployment(env)
    _, result = _build(env, dep, FakeNVML([A100]), force=True)
    assert len(result.steps) == 4
    m = read_manifest(env / "engines" / dep.spec.name / "decode")
    assert m.compute_capability == "8.0"  # the truth: built on the A100


def test_toolchain_version_must_match(env, monkeypatch):
    monkeypatch.setattr(toolchain, "dist_version", lambda d: "1.0.0" if "llm" in d else None)
    with pytest.raises(ToolchainError, match="TensorRT-LLM here is 1.0.0, target trtllm-0.21 "
                       "needs 0.21.0"):
        _build(env, _deployment(env), FakeNVML([H100, L40S]))


def test_missing_tools_are_named(env, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("PDTRT_TRTLLM_EXAMPLES", str(env / "nowhere"))
    with pytest.raises(ToolchainError) as err:
        _build(env, _deployment(env), FakeNVML([H100, L40S]))
    assert "prefill-trtllm-build: trtllm-build not found" in err.value.message
    assert f"{env}/nowhere/quantization/quantize.py not found" in err.value.message


def test_config_without_weights_is_refused(env):
    for w in (env / "hf").glob("*.safetensors"):
        w.unlink()
    with pytest.raises(BuildError, match="has a config.json but no weights"):
        _build(env, _deployment(env), FakeNVML([H100, L40S]))


def test_missing_hf_checkpoint(env):
    (env / "hf" / "config.json").rename(env / "hf" / "x.json")
    (env / "hf" / "x.json").rename(env / "config.json")
    def edit(d):
        d["model"]["path"] = str(env / "config.json")
    dep = load_deployment(write_spec(env, variant(edit)))
    plan = plan_build(dep, engines_root=env / "engines")
    shutil.move(str(env / "config.json"), str(env / "gone.json"))
    with pytest.raises(BuildError, match="no Hugging Face checkpoint"):
        run_build(plan, dep, nvml=FakeNVML([H100, L40S]))
