"""Issue 49: a normal stop never makes a stub fault, cycle after cycle, on the real server.

Each cycle starts the reference deployment the operator's way (``pdtrt serve SPEC`` with the
OpenAI front), sends one request on every path -- ``ensemble``, ``ensemble_aggregated``, the
OpenAI front, and a streamed chat whose client hangs up mid-stream (front -> router) -- and
stops it: SIGTERM to ``pdtrt serve`` (what Ctrl-C, systemd and Kubernetes send), or ``pdtrt
stop`` of a detached server. It fails on a kernel-log line of one of *this* server's stubs
(``triton_python_b[PID]``, only pids collected in the cycle, so a parallel test's fault cannot
fail it and its own cannot hide), on a stub crash the server log records (UCX's SIGSEGV
handler catches some before the kernel sees them), on a stub still running after the stop,
and on a SIGKILL the stop had to log. ``PDTRT_TEST_STOP_CYCLES`` sets the cycles per test (2
by default; the issue's check is 10).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from e2e_client import ensemble_inputs, generate, hang_up_mid_stream, wait_for
from supervised_server import PDTRT, serve_detached

from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.model_control import server_stubs
from pdtrt.serve.procs import children, process_running
from pdtrt.serve.triton_server import free_port
from tests.conftest import EXAMPLES

pytestmark = [
    pytest.mark.triton,
    pytest.mark.slow,
    pytest.mark.skipif(find_embedded_triton() is None or importlib.util.find_spec("ucxx") is None,
                       reason="needs the embedded Triton server (nvidia-pytriton) and ucxx"),
]

CYCLES = int(os.environ.get("PDTRT_TEST_STOP_CYCLES", "2"))
MODEL = "pdtrt/tiny-llama"
SPEC = EXAMPLES / "reference-cpu.yaml"
STUB_CRASHES = ("Non-graceful termination", "Caught signal", "Segmentation fault",
                "Signal (11)")


def _kernel_log() -> list[str]:
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"the kernel log is unreadable here (dmesg: {out.stderr.strip()}); "
                    "stub faults could not be seen")
    return out.stdout.splitlines()


def _one_request_on_each_path(grpc_url: str, openai_url: str) -> None:
    for model in ("ensemble", "ensemble_aggregated"):
        out = generate(grpc_url, model, ensemble_inputs("one two three", 4))
        assert out.error is None and out.final_seen and out.texts, (model, out)
    request = urllib.request.Request(
        f"{openai_url}/chat/completions", method="POST",
        data=json.dumps({"model": MODEL, "max_tokens": 4,
                         "messages": [{"role": "user", "content": "hello"}]}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        assert json.loads(response.read())["choices"]
    hang_up_mid_stream(openai_url.removesuffix("/v1"), MODEL)


def _tritonserver_of(serve_pid: int) -> int:
    [pid] = [p for p in children(serve_pid)
             if Path(f"/proc/{p}/comm").read_text().strip() == "tritonserver"]
    return pid


def _serve_attached(engines_root: Path, workdir: Path) -> tuple[subprocess.Popen[str], dict]:
    """``pdtrt serve SPEC --json`` in the foreground, once it has printed its endpoints."""
    proc = subprocess.Popen([PDTRT, "serve", str(SPEC), "--engines-dir", str(engines_root),
                             "--workdir", str(workdir), "--openai-port", str(free_port()),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    text = ""
    while line := proc.stdout.readline():
        text += line
        if line.startswith("}"):
            info = json.loads(text)
            assert "error" not in info, info  # it did not start: --json prints the error
            return proc, info
    proc.wait(30)
    raise AssertionError(f"pdtrt serve ended before serving: {proc.stderr.read()}")


def _check_stop(server_pid: int, stubs: dict[int, str], log_before: list[str],
                workdir: Path, stop_stderr: str) -> None:
    assert set(stubs.values()) >= {"preprocessing", "postprocessing", "router", "prefill",
                                   "decode", "aggregated"}, stubs
    assert wait_for(lambda: not any(map(process_running, stubs)), 10), \
        {pid: model for pid, model in stubs.items() if process_running(pid)}
    assert not process_running(server_pid)
    seen = set(log_before)
    faults = [line for line in _kernel_log() if line not in seen
              and any(f"triton_python_b[{pid}]" in line for pid in stubs)]
    assert faults == [], faults
    log = (workdir / "server.log").read_text(errors="replace")
    assert [c for c in STUB_CRASHES if c in log] == []
    assert "SIGKILL" not in stop_stderr, stop_stderr  # everything exited by itself


@pytest.mark.parametrize("cycle", range(CYCLES))
def test_sigterm_to_pdtrt_serve_leaves_no_stub_fault_and_no_stub(reference_engines, tmp_path,
                                                                 cycle):
    root, _dep = reference_engines
    log_before = _kernel_log()
    proc, info = _serve_attached(root, tmp_path)
    try:
        server_pid = _tritonserver_of(proc.pid)
        stubs = server_stubs(server_pid)
        _one_request_on_each_path(info["endpoints"]["grpc"], info["endpoints"]["openai"])
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _check_stop(server_pid, stubs, log_before, tmp_path, err)


@pytest.mark.parametrize("cycle", range(CYCLES))
def test_pdtrt_stop_of_a_detached_server_leaves_no_stub_fault_and_no_stub(reference_engines,
                                                                          tmp_path, cycle):
    root, _dep = reference_engines
    log_before = _kernel_log()
    info = serve_detached(SPEC, root, tmp_path, extra_args=("--openai-port", str(free_port())))
    stopped = None
    try:
        server_pid = int(info["state_file"]["pid"])
        stubs = server_stubs(server_pid)
        _one_request_on_each_path(info["endpoints"]["grpc"], info["endpoints"]["openai"])
        stopped = subprocess.run([PDTRT, "stop", str(tmp_path)], capture_output=True,
                                 text=True, timeout=90)
        assert stopped.returncode == 0, stopped.stderr
    finally:
        if stopped is None:
            subprocess.run([PDTRT, "stop", str(tmp_path)], capture_output=True, timeout=90)
    _check_stop(server_pid, stubs, log_before, tmp_path, stopped.stderr)
