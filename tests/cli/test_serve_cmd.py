"""pdtrt serve / pdtrt stop (the real embedded server, on a tiny test repository)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES

from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.triton_server import free_port

MODELS = Path(__file__).resolve().parent.parent / "triton_models"
GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "repo"


def test_serve_unknown_binary_is_exit_2(run, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "echo_stream", repo / "echo_stream")
    result = run("serve", str(repo), "--workdir", str(tmp_path / "wd"), "--tritonserver",
                 str(tmp_path / "no-tritonserver"), "--timeout", "5")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-2].startswith("error: cannot run ")


def test_serve_spec_without_trtllm_engines_says_build_first(run, tmp_path):
    result = run("serve", str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml"), "--workdir",
                 str(tmp_path / "wd"), "--engines-dir", str(tmp_path / "engines"),
                 "--mode", "disaggregated")
    assert result.exit_code == 2
    assert "no engines for prefill, decode" in result.stderr
    assert "hint: build them on their GPUs first" in result.stderr


def test_a_router_config_the_supervisor_cannot_read_fails_before_triton_starts(run, tmp_path):
    """Found 2026-12-06: the error came after Triton had started, and `--detach` left that
    server running with nobody to stop it."""
    repo = tmp_path / "repo"
    shutil.copytree(GOLDEN / "reference-cpu-disaggregated", repo)
    config = repo / "router" / "config.pbtxt"
    text = config.read_text()
    assert 'string_value: "grpc"' in text
    config.write_text(text.replace('string_value: "grpc"', 'string_value: "pigeon"', 1))
    work = tmp_path / "wd"
    result = run("serve", str(repo), "--workdir", str(work), "--detach", "--timeout", "5")
    assert result.exit_code != 0
    assert "router/config.pbtxt: phase_transport 'pigeon' is not bls or grpc" in result.stderr
    assert not (work / "server.log").exists()  # no server was started


@pytest.mark.triton
@pytest.mark.skipif(find_embedded_triton() is None, reason="nvidia-pytriton is not installed")
def test_detach_then_stop(run, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "echo_stream", repo / "echo_stream")
    wd = tmp_path / "wd"
    ports = [str(free_port()) for _ in range(3)]
    result = run("serve", str(repo), "--workdir", str(wd), "--host", "127.0.0.1",
                 "--grpc-port", ports[0], "--http-port", ports[1], "--metrics-port", ports[2],
                 "--detach", "--no-openai", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert "openai" not in info["endpoints"] and info["warnings"] == []
    assert info["endpoints"]["grpc"] == f"127.0.0.1:{ports[0]}"
    assert info["detached"] is True and (wd / "serve.json").is_file()
    state = json.loads((wd / "serve.json").read_text())
    pid = state["pid"]
    assert Path(f"/proc/{pid}").exists()
    assert list(Path("/dev/shm").glob(f"{state['shm_prefix']}*")), "its backend's regions"
    stopped = run("stop", str(wd), "--json")
    assert json.loads(stopped.stdout) == {"stopped": pid}
    assert list(Path("/dev/shm").glob(f"{state['shm_prefix']}*")) == []
    assert not (wd / "serve.json").exists()
    again = run("stop", str(wd))
    assert again.exit_code == 2 and "no detached server" in again.stderr


def test_stop_with_a_state_file_that_is_not_ours_says_so(run, tmp_path):
    (tmp_path / "serve.json").write_text('{"repository": "/x", "detached": true}')
    result = run("stop", str(tmp_path))
    assert result.exit_code == 2
    assert "is not the state pdtrt serve --detach wrote" in result.stderr
    assert "hint: find the server with `pgrep -af tritonserver`" in result.stderr
