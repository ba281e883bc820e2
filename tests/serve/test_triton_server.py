"""The server launcher against the real embedded Triton 2.51 (nvidia-pytriton)."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from e2e_client import wait_for

from pdtrt.errors import ServerError
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.procs import children
from pdtrt.serve.triton_server import ServerConfig, TritonServer, remove_shm_regions
from tests.conftest import TESTS

MODELS = TESTS / "triton_models"

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(find_embedded_triton() is None,
                       reason="the embedded Triton server (nvidia-pytriton) is not installed"),
]


def _repo(tmp: Path, *names: str) -> Path:
    repo = tmp / "repo"
    for name in names:
        shutil.copytree(MODELS / name, repo / name)
    return repo


def test_streams_and_stops_with_its_stubs(tmp_path):
    import tritonclient.grpc as grpcclient

    server = TritonServer(ServerConfig(repository=_repo(tmp_path, "echo_stream"),
                                       log_path=tmp_path / "server.log"))
    with server:
        ep = server.endpoints
        assert ep is not None and server.running
        pid = server._proc.pid  # noqa: SLF001 -- checking the process tree
        assert children(pid), "the Python-backend stub runs as a child of tritonserver"
        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(ep.grpc_url)
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            inp = grpcclient.InferInput("IN", [3], "INT32")
            inp.set_data_from_numpy(np.array([7, 8, 9], dtype=np.int32))
            client.async_stream_infer("echo_stream", [inp], enable_empty_final_response=True)
            got = []
            while True:
                result, error = results.get(timeout=30)
                assert error is None
                resp = result.get_response()
                if resp.outputs:
                    got.append(int(result.as_numpy("OUT")[0]))
                if resp.parameters["triton_final_response"].bool_param:
                    break
        finally:
            client.stop_stream()
            client.close()
        assert got == [7, 8, 9]
    assert not server.running
    assert not os.path.exists(f"/proc/{pid}") or children(pid) == []


def _regions(prefix: str) -> list[Path]:
    return sorted(Path("/dev/shm").glob(f"{prefix}*"))


def test_a_killed_server_leaves_no_shared_memory_behind(tmp_path):
    server = TritonServer(ServerConfig(repository=_repo(tmp_path, "echo_stream"),
                                       log_path=tmp_path / "server.log"))
    server.start()
    try:
        assert _regions(server.shm_prefix), "the Python backend's regions use this prefix"
        os.killpg(server._proc.pid, signal.SIGKILL)  # noqa: SLF001 -- a crash, not a stop
        server._proc.wait(30)  # noqa: SLF001
        assert _regions(server.shm_prefix), "a killed server leaves its regions"
    finally:
        server.stop()
    assert _regions(server.shm_prefix) == []


def test_remove_shm_regions_takes_only_pdtrt_prefixes(tmp_path):
    prefix = "pdtrt_0123456789ab_"
    for name in (f"{prefix}one", f"{prefix}two", "pdtrt_ffffffffffff_other", "unrelated"):
        (tmp_path / name).write_bytes(b"x")
    assert remove_shm_regions(prefix, tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pdtrt_ffffffffffff_other",
                                                          "unrelated"]
    for bad in ("", "pdtrt_", "pdtrt_*", "../x"):
        with pytest.raises(ValueError, match="not a pdtrt shared-memory prefix"):
            remove_shm_regions(bad, tmp_path)


def test_reports_the_model_that_failed(tmp_path):
    server = TritonServer(ServerConfig(repository=_repo(tmp_path, "echo_stream", "broken"),
                                       log_path=tmp_path / "server.log"))
    with pytest.raises(ServerError) as info:
        server.start(timeout_s=60)
    assert "model 'broken' failed to load" in info.value.message
    assert "broken on purpose" in info.value.message
    assert not server.running


def test_missing_binary(tmp_path):
    server = TritonServer(ServerConfig(repository=tmp_path, log_path=tmp_path / "s.log",
                                       tritonserver=tmp_path / "no-such-tritonserver"))
    with pytest.raises(ServerError, match="cannot run .*no-such-tritonserver"):
        server.start(timeout_s=5)


FLAKY_SERVER = """#!{python}
# A stand-in tritonserver: the first run aborts like Triton 2.51's Python backend sometimes
# does; later runs answer the readiness probe on --http-port until killed.
import http.server, pathlib, sys
marker = pathlib.Path({marker!r})
if not marker.exists():
    marker.write_text("aborted once")
    print("terminate called after throwing an instance of "
          "'boost::interprocess::lock_exception'", flush=True)
    sys.exit(134)
{serve}
"""

# answers 200 on --http-port at once and on --metrics-port after {metrics_after_s} s, as Triton
# 2.51 starts its metrics service after its HTTP one
_SERVE = """import threading, time
def port(name):
    return int(next(a for a in sys.argv if a.startswith(f"--{{name}}-port=")).split("=")[1])
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
def serve(name, after_s):
    time.sleep(after_s)
    http.server.HTTPServer(("127.0.0.1", port(name)), Ready).serve_forever()
threading.Thread(target=serve, args=("metrics", {metrics_after_s}), daemon=True).start()
serve("http", 0)"""


def test_a_lock_exception_abort_at_start_is_retried_and_its_log_kept(tmp_path):
    import sys

    binary = tmp_path / "tritonserver"
    binary.write_text(FLAKY_SERVER.format(python=sys.executable, marker=str(tmp_path / "marker"),
                                          serve=_SERVE.format(metrics_after_s=0)))
    binary.chmod(0o755)
    log = tmp_path / "server.log"
    server = TritonServer(ServerConfig(repository=tmp_path, log_path=log, tritonserver=binary))
    try:
        server.start(timeout_s=30)
    finally:
        server.stop()
    assert "lock_exception" in (tmp_path / "server.log.attempt1").read_text()
    assert "lock_exception" not in log.read_text()


def test_ready_waits_for_the_metrics_endpoint_too(tmp_path):
    """Seen in a full-suite run: a test read the metrics port the moment the server was ready
    and was refused -- Triton starts its metrics service after its HTTP one."""
    import sys
    import urllib.request

    binary = tmp_path / "tritonserver"
    (tmp_path / "marker").write_text("no abort")
    binary.write_text(FLAKY_SERVER.format(python=sys.executable, marker=str(tmp_path / "marker"),
                                          serve=_SERVE.format(metrics_after_s=1.5)))
    binary.chmod(0o755)
    server = TritonServer(ServerConfig(repository=tmp_path, log_path=tmp_path / "s.log",
                                       tritonserver=binary))
    try:
        endpoints = server.start(timeout_s=30)
        with urllib.request.urlopen(endpoints.metrics_url, timeout=2) as resp:
            assert resp.status == 200  # answers the moment start() has returned
    finally:
        server.stop()


def test_other_start_failures_are_not_retried(tmp_path):
    binary = tmp_path / "tritonserver"
    binary.write_text("#!/bin/sh\necho 'error: something else' >> " + str(tmp_path / "runs")
                      + "\nexit 1\n")
    binary.chmod(0o755)
    server = TritonServer(ServerConfig(repository=tmp_path, log_path=tmp_path / "s.log",
                                       tritonserver=binary))
    with pytest.raises(ServerError, match="exited with status 1"):
        server.start(timeout_s=10)
    assert (tmp_path / "runs").read_text().count("something else") == 1


STUB_OUTLIVING_SERVER = """#!{python}
# A stand-in tritonserver whose one "stub" outlives it: the stub ignores SIGTERM and, like
# python_backend r24.10's health thread, looks whether its parent is alive (kill(pid, 0));
# the server answers the readiness probes and exits at once on SIGTERM.
import http.server, os, pathlib, signal, sys, time
seen = pathlib.Path({seen!r})
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    while True:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            seen.write_text("the server was gone while its stub lived")
        time.sleep(0.005)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
{serve}
"""


def test_a_stub_that_outlives_its_server_is_killed_before_the_server_is_reaped(tmp_path,
                                                                              monkeypatch):
    """Issue 49: a stub whose server has exited and been reaped takes python_backend r24.10's
    non-graceful path (unmaps its shared memory, exit(1)) while its main thread still waits in
    it -- the 'segfault at 7f...220 ... error 6 in libc.so.6[90bb4]' of a normal stop. A zombie
    still answers kill(pid, 0), so stop() SIGKILLs the group while the server is a zombie."""
    seen = tmp_path / "seen"
    server, pid, stub = _stand_in(tmp_path, STUB_OUTLIVING_SERVER, seen=str(seen))
    states = []
    signal_group = TritonServer._signal

    def recording(proc, sig):
        if sig is signal.SIGKILL:  # the server's state then: "Z" (exited, not reaped) or gone
            stat = Path(f"/proc/{pid}/stat")
            states.append(stat.read_text().split()[2] if stat.exists() else "reaped")
        signal_group(proc, sig)

    monkeypatch.setattr(TritonServer, "_signal", staticmethod(recording))
    assert server.stop(grace_s=10) == 0
    assert states and set(states) == {"Z"}, states
    assert _gone_within(stub, 5.0)  # SIGKILLed with the group
    assert not seen.exists(), seen.read_text()


CRASHING_SERVER = STUB_OUTLIVING_SERVER.replace(
    "signal.signal(signal.SIGTERM, lambda *_: os._exit(0))",
    """signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
import threading
def crash_when_told():
    while not pathlib.Path({crash!r}).exists():
        time.sleep(0.01)
    os._exit(3)
threading.Thread(target=crash_when_told, daemon=True).start()""")


def test_a_server_that_exits_by_itself_is_not_reaped_before_stop_kills_its_stubs(tmp_path):
    """A crashed server: ``running`` and ``returncode`` see its exit without reaping it (a
    zombie still answers its stubs' kill(pid, 0)); stop() kills the stub, then reaps."""
    seen, crash = tmp_path / "seen", tmp_path / "crash"
    server, pid, stub = _stand_in(tmp_path, CRASHING_SERVER, seen=str(seen), crash=str(crash))
    crash.write_text("now")
    try:
        assert wait_for(lambda: not server.running, 10.0)
        assert server.returncode == 3
        time.sleep(0.3)  # the stand-in stub looks every 5 ms
        assert Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # not reaped
        assert not seen.exists(), seen.read_text()
    finally:
        code = server.stop(grace_s=10)
    assert code == 3
    assert _gone_within(stub, 5.0)
    assert not seen.exists(), seen.read_text()


def _stand_in(tmp: Path, template: str, **values: str) -> tuple[TritonServer, int, int]:
    """A started stand-in server of ``template`` with one stub: (server, its pid, the stub's)."""
    import sys

    binary = tmp / "tritonserver"
    binary.write_text(template.format(python=sys.executable,
                                      serve=_SERVE.format(metrics_after_s=0), **values))
    binary.chmod(0o755)
    server = TritonServer(ServerConfig(repository=tmp, log_path=tmp / "server.log",
                                       tritonserver=binary))
    server.start(timeout_s=30)
    [stub] = children(server.pid)
    return server, server.pid, stub


def _gone_within(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] in ("Z", "X"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False
