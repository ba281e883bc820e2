"""pdtrt serve / pdtrt stop (the real embedded server, on a tiny test repository)."""

from __future__ import annotations

import json
import shutil
import urllib.request
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


@pytest.mark.triton
@pytest.mark.skipif(find_embedded_triton() is None, reason="nvidia-pytriton is not installed")
def test_a_detached_server_that_dies_is_restarted_on_its_ports_then_given_up(run, tmp_path):
    """Triton 2.51 can abort when a stub dies mid-response (docs/design/serve.md, "owner-dead
    mutex"): the supervisor starts the server again on the same ports and the state file names
    the new one, so that `pdtrt stop` stops it; past --max-restarts it gives up and says so."""
    import os
    import signal
    import time

    from e2e_client import wait_for

    from pdtrt.serve.procs import process_running

    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "echo_stream", repo / "echo_stream")
    wd = tmp_path / "wd"
    result = run("serve", str(repo), "--workdir", str(wd), "--detach", "--no-openai",
                 "--max-restarts", "1", "--json")
    assert result.exit_code == 0, result.output
    ready = f"http://{json.loads(result.stdout)['endpoints']['http']}/v2/health/ready"
    state = lambda: json.loads((wd / "serve.json").read_text())  # noqa: E731
    first = state()["pid"]

    try:
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: state()["pid"] != first, timeout_s=30), "not restarted"
        second = state()["pid"]
        assert wait_for(lambda: _answers(ready), timeout_s=60)  # the same port
        assert wait_for(lambda: f"tritonserver restarted (pid {second})"
                        in (wd / "supervisor.log").read_text(), timeout_s=30)
        log = (wd / "supervisor.log").read_text()
        # not its child: how it ended is unknown to the supervisor
        assert f"tritonserver (pid {first}) gone; restarting it on the same ports" in log
        assert (wd / "server.log.restart1").is_file()
        os.kill(second, signal.SIGKILL)  # the one restart allowed is spent
        supervisor = state()["supervisor_pid"]
        assert wait_for(lambda: not process_running(supervisor), timeout_s=30)
        assert f"tritonserver (pid {second}) killed by SIGKILL; not restarted: it died 1 " \
            "times within 600 s" in (wd / "supervisor.log").read_text()
        assert state()["pid"] == second and not _answers(ready)
    finally:
        stopped = run("stop", str(wd), "--json")
    assert stopped.exit_code == 0, stopped.output
    assert not (wd / "serve.json").exists()
    time.sleep(0.2)
    assert not process_running(first) and not process_running(second)


@pytest.mark.triton
@pytest.mark.skipif(find_embedded_triton() is None, reason="nvidia-pytriton is not installed")
def test_an_attached_server_that_dies_is_restarted_by_its_pdtrt_serve(tmp_path):
    """In the foreground too: `pdtrt serve` starts a server that died again on its ports,
    and still stops it (and only it) on SIGTERM."""
    import json as json_
    import os
    import signal
    import subprocess
    import sys

    from e2e_client import wait_for

    from pdtrt.serve.procs import children, process_running

    repo = tmp_path / "repo"
    shutil.copytree(MODELS / "echo_stream", repo / "echo_stream")
    serve = subprocess.Popen(
        [str(Path(sys.executable).with_name("pdtrt")), "serve", str(repo), "--workdir",
         str(tmp_path / "wd"), "--no-openai", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [serve.stdout.readline()]  # printed (indented) once ready
        while lines[-1] not in ("}\n", ""):
            lines.append(serve.stdout.readline())
        info = json_.loads("".join(lines))
        ready = f"http://{info['endpoints']['http']}/v2/health/ready"

        def servers() -> list[int]:
            return [pid for pid in children(serve.pid)
                    if process_running(pid) and "tritonserver" in _argv0(pid)]

        (first,) = servers()
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: servers() not in ([], [first]), timeout_s=30), "not restarted"
        (second,) = servers()
        assert wait_for(lambda: _answers(ready), timeout_s=30)
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=60) == 0, serve.stderr.read()
        assert not process_running(second)
        assert f"tritonserver (pid {first}) killed by SIGKILL; restarting it" in \
            serve.stderr.read()
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def test_stop_with_a_state_file_that_is_not_ours_says_so(run, tmp_path):
    (tmp_path / "serve.json").write_text('{"repository": "/x", "detached": true}')
    result = run("stop", str(tmp_path))
    assert result.exit_code == 2
    assert "is not the state pdtrt serve --detach wrote" in result.stderr
    assert "hint: find the server with `pgrep -af tritonserver`" in result.stderr
