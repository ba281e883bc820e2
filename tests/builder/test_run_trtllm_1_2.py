"""Running trtllm-1.2 builds: the options files (no GPU, atomic, deterministic, resumable),
the ModelOpt FP8 step against a fake ``hf_ptq.py`` that records its argv, and the flagship's
weights resolved before serving (a gated repository without a token; HF_HUB_OFFLINE with a
local snapshot, which the repository then loads) -- without the Hub."""

from __future__ import annotations

import json
import os
import shutil
import socket

import pytest
import requests
import yaml
from buildspecs import fake_hf_checkpoint, make_hub_snapshot, write_spec
from click.testing import CliRunner
from conftest import EXAMPLES
from fake_trtllm import install_fake_tools
from fakes import FakeNVML
from huggingface_hub.utils import GatedRepoError

from pdtrt.blueprint.manifest import read_manifest
from pdtrt.builder.plan import plan_build
from pdtrt.builder.run import StepStatus, run_build
from pdtrt.cli.main import cli
from pdtrt.enums import Phase
from pdtrt.errors import BuildError, GPUMismatchError, ToolchainError
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.spec.load import load_deployment
from pdtrt.targets import hf_snapshot, toolchain

H100 = ("NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0))
L40S = ("NVIDIA L40S", 48_305_799_168, (8, 9))
PINNED = {"tensorrt_llm": "1.2.1", "tensorrt": "10.14.1.48", "nvidia-modelopt": "0.37.0"}


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Fake hf_ptq.py under the examples dir, a fake HF checkpoint, TensorRT-LLM 1.2.1 and
    ModelOpt 0.37.0 'installed'."""
    _, examples = install_fake_tools(tmp_path)
    monkeypatch.setenv("PDTRT_TRTLLM_EXAMPLES", str(examples))
    monkeypatch.setenv("FAKE_TRTLLM_RECORD", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("CUDA_VERSION", "13.1.0")
    monkeypatch.setattr(toolchain, "dist_version", PINNED.get)
    fake_hf_checkpoint(tmp_path)
    return tmp_path


def _deployment(tmp, edit=lambda d: None):
    data = yaml.safe_load((EXAMPLES / "llama3-8b-h100-l40s.yaml").read_text())
    data["model"]["path"] = str(tmp / "hf")
    edit(data)
    return load_deployment(write_spec(tmp, data))


def _recorded(tmp):
    path = tmp / "argv.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_options_files_need_no_gpu_and_resume(env):
    dep = _deployment(env)
    plan = plan_build(dep, engines_root=env / "engines")
    result = run_build(plan, dep, nvml=FakeNVML([]))  # no GPU here: nothing needs one
    assert [r.status for r in result.steps] == [StepStatus.RAN] * 3
    aggregated = env / "engines" / dep.spec.name / "aggregated" / "extra_llm_api_options.yaml"
    assert aggregated.read_text() == plan.steps[0].content  # the baseline's own file
    for phase in Phase:
        step = plan.phase(phase).steps[-1]
        phase_dir = env / "engines" / dep.spec.name / str(phase)
        written = (phase_dir / "extra_llm_api_options.yaml").read_text()
        assert written == step.content  # what the dry run showed is what was written
        assert not list(phase_dir.glob(".*.tmp"))  # written atomically
        m = read_manifest(phase_dir)
        assert (m.phase, m.target, m.gpu_name) == (phase, "trtllm-1.2", None)
        assert m.kv_layout.tokens_per_block == 32 and m.kv_layout.kv_dtype == "fp8"
    assert _recorded(env) == []
    again = run_build(plan, dep, nvml=FakeNVML([]))
    assert [r.status for r in again.steps] == [StepStatus.SKIPPED] * 3
    changed = _deployment(env, lambda d: d["kv_transfer"].update(timeout_s=10))
    third = run_build(plan_build(changed, engines_root=env / "engines"), changed,
                      nvml=FakeNVML([]))
    # the timeout is in the phases' files only: the baseline's is current
    assert [r.status for r in third.steps] == [StepStatus.SKIPPED, StepStatus.RAN, StepStatus.RAN]


def test_fp8_runs_modelopt_with_the_planned_argv(env):
    dep = _deployment(env, lambda d: d["model"].update(weights="fp8"))
    plan = plan_build(dep, engines_root=env / "engines")
    result = run_build(plan, dep, nvml=FakeNVML([H100, L40S]))
    assert [s.name for s in plan.steps] == ["prefill-hf-ptq", "aggregated-llm-options",
                                            "prefill-llm-options", "decode-hf-ptq",
                                            "decode-llm-options"]
    assert [r.status for r in result.steps] == [StepStatus.RAN] * 5
    recorded = _recorded(env)
    assert [r[0] for r in recorded] == ["hf_ptq.py"] * 2
    assert recorded[1][1:] == list(plan.steps[3].argv[2:])  # the exact rendered argv ran
    assert recorded[1][1:5] == ["--pyt_ckpt_path", str(env / "hf"), "--export_path",
                                str(env / "engines" / dep.spec.name / "checkpoints/decode")]
    m = read_manifest(env / "engines" / dep.spec.name / "decode")
    assert m.versions["nvidia_modelopt"] == "0.37.0" and m.gpu_name == "NVIDIA L40S"


def test_fp8_needs_the_phase_gpu_and_the_pinned_modelopt(env, monkeypatch):
    dep = _deployment(env, lambda d: d["model"].update(weights="fp8"))
    plan = plan_build(dep, engines_root=env / "engines")
    with pytest.raises(GPUMismatchError):
        run_build(plan, dep, nvml=FakeNVML([H100]))
    monkeypatch.setattr(toolchain, "dist_version",
                        {**PINNED, "nvidia-modelopt": "0.35.1"}.get)
    with pytest.raises(ToolchainError) as err:
        run_build(plan, dep, nvml=FakeNVML([H100, L40S]))
    assert err.value.message == ("nvidia-modelopt here is 0.35.1, TensorRT-LLM 1.2.1 pins "
                                 "~=0.37.0")
    assert not os.path.exists(env / "argv.jsonl")


# --- the flagship as shipped: no model.path, the weights resolved before serving --------------
FLAGSHIP = EXAMPLES / "llama3-8b-h100-l40s.yaml"
CURRENT = "meta-llama/Llama-3.1-8B"  # the Hub's name for the example's meta-llama/Meta-Llama-3.1-8B


@pytest.fixture
def run():
    """``pdtrt ARGS`` in this process (so the fakes below hold); click's Result."""
    return lambda *args: CliRunner().invoke(cli, list(args), catch_exceptions=True)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """No Hub: every socket connection fails; a cache of this test's own; online by default."""
    def refuse(*_args, **_kwargs):
        raise OSError("tests must not reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return tmp_path / "hub"


def test_flagship_without_a_token_names_the_gated_repository(tmp_path, hub, monkeypatch, run):
    """What the Hub answers a gated repository without a token, as huggingface_hub raises it."""
    response = requests.Response()
    response.status_code = 401

    def gated(repo_id: str) -> None:
        raise GatedRepoError(f"401 Client Error. Cannot access gated repo {repo_id}",
                             response=response)

    monkeypatch.setattr(hf_snapshot, "hub_api", lambda: hf_snapshot.HubApi(
        get_token=lambda: None, auth_check=gated, snapshot_download=None))
    dep = load_deployment(FLAGSHIP)
    with pytest.raises(BuildError) as err:
        run_build(plan_build(dep, engines_root=tmp_path / "engines"), dep)
    assert err.value.message == (f"{CURRENT} is a gated repository on the Hugging Face Hub, "
                                 "and no token is set (HF_TOKEN, or `hf auth login`)")
    assert not (tmp_path / "engines" / dep.spec.name).exists()  # first step: nothing written
    result = run("build", str(FLAGSHIP), "--engines-dir", str(tmp_path / "engines"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {CURRENT} is a gated repository")
    assert f"accept its license at https://huggingface.co/{CURRENT}" in result.stderr


def test_flagship_offline_loads_the_local_snapshot(tmp_path, hub, monkeypatch, run):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = make_hub_snapshot(hub, CURRENT)
    engines = tmp_path / "engines"
    result = run("build", str(FLAGSHIP), "--engines-dir", str(engines), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [s["name"] for s in data["result"]["steps"]] == [
        "hf-snapshot", "aggregated-llm-options", "prefill-llm-options", "decode-llm-options"]
    record = json.loads((engines / "llama3-8b-h100-l40s/weights/weights.json").read_text())
    folder = hub / "models--meta-llama--Llama-3.1-8B"
    assert record == {"model": "meta-llama/Meta-Llama-3.1-8B", "repo_id": CURRENT,
                      "revision": "a" * 40, "snapshot": str(snapshot),
                      "repo_folder": str(folder), "offline": True}
    dep = load_deployment(FLAGSHIP)
    pools = generate_repo(dep, tmp_path / "pools", mode=RepoMode.POOLS,
                          engines_root=engines).out
    both = generate_repo(dep, tmp_path / "both", mode=RepoMode.BOTH, engines_root=engines).out
    for config in (pools / "decode", both / "prefill", both / "aggregated",
                   both / "preprocessing", both / "postprocessing"):
        assert f'string_value: "{snapshot}"' in (config / "config.pbtxt").read_text()
    for repo in (pools, both):
        launch = (repo / "launch.sh").read_text()
        assert f"-v {folder}:{folder}:ro" in launch  # the links of the snapshot resolve
        assert "HF_TOKEN" not in launch  # nothing to download in the container
        assert "HF_HUB_OFFLINE=1" in (repo / "pdtrt.env").read_text()
    again = run_build(plan_build(dep, engines_root=engines), dep)
    assert [r.status for r in again.steps] == [StepStatus.SKIPPED] * 4
    shutil.rmtree(folder)  # the cache was cleaned: the record is stale, the step runs again
    with pytest.raises(BuildError, match="^HF_HUB_OFFLINE is set and this host's Hugging "
                       f"Face cache has no snapshot of {CURRENT}"):
        run_build(plan_build(dep, engines_root=engines), dep)
