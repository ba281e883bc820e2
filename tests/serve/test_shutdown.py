"""Clean shutdown, nothing left behind (issue 15, item 6), against the real Triton 2.51 server.

- Stopping a reference server with streams in flight through every path: each stream ends
  within seconds with "the server is shutting down", the server exits 0 by itself (no SIGKILL),
  no stub crashes (kernel log, when readable, and the server log) and no stub outlives it, and
  Triton itself removes the Python backend's shared memory (pdtrt's own cleanup is switched off
  for the check).
- A starter killed with SIGKILL takes its server along within seconds (parent-death signal);
  the regions that server leaves are removed at the next start, while those of a live owner
  stay. A detached server (``die_with_parent=False``) outlives its starter.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from e2e_client import _input, engine_inputs, ensemble_inputs

import pdtrt.serve.triton_server as triton_server
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.procs import children
from pdtrt.serve.shm import SHM_DIR, new_shm_prefix, record_owners, remove_shm_regions
from pdtrt.serve.triton_server import ServerConfig, TritonServer
from tests.conftest import EXAMPLES, ROOT, TESTS, serve_reference

pytestmark = [
    pytest.mark.triton,
    pytest.mark.skipif(find_embedded_triton() is None,
                       reason="the embedded Triton server (nvidia-pytriton) is not installed"),
]

SHUTTING_DOWN = "the server is shutting down"


class _Stream(threading.Thread):
    """One streaming request, watched live: responses so far, how and when it ended."""

    def __init__(self, url: str, model: str, inputs: list, request_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.model, self.inputs, self.request_id = url, model, inputs, request_id
        self.responses = 0
        self.error: str | None = None
        self.final = False
        self.ended_at: float | None = None

    def run(self) -> None:
        import tritonclient.grpc as grpcclient

        results: queue.Queue = queue.Queue()
        client = grpcclient.InferenceServerClient(self.url)
        try:
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            client.async_stream_infer(self.model, self.inputs, request_id=self.request_id,
                                      enable_empty_final_response=True)
            while True:
                result, error = results.get(timeout=120)
                if error is not None:
                    self.error = str(error)
                    return
                response = result.get_response()
                self.responses += bool(response.outputs)
                if response.parameters["triton_final_response"].bool_param:
                    self.final = True
                    return
        finally:
            self.ended_at = time.monotonic()
            client.stop_stream()
            client.close()


def _gone(pid: int) -> bool:
    """Not running: no such process, or a zombie nobody has reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()


def _segfaults() -> set[str] | None:
    """The kernel log's segfault lines, or None where it cannot be read."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    return {line for line in out.stdout.splitlines() if "segfault" in line}


def _regions(prefix: str) -> list[str]:
    return sorted(p.name for p in SHM_DIR.glob(f"{prefix}*"))


@pytest.mark.slow
def test_a_stop_ends_every_stream_with_an_error_and_leaves_nothing(reference_engines, tmp_path,
                                                                    monkeypatch):
    root, _dep = reference_engines
    server, _prepared = serve_reference(EXAMPLES / "reference-cpu.yaml", root, tmp_path / "serve")
    pid, prefix = server._proc.pid, server.shm_prefix  # noqa: SLF001
    url = server.endpoints.grpc_url
    no_eos = _input("end_id", np.array([[-1]], dtype=np.int32), "INT32")
    streams = [_Stream(url, "router", engine_inputs([1, 40 + i, 41, 42, 43], 480, [no_eos]),
                       f"router-{i}") for i in range(2)]
    streams += [_Stream(url, model, ensemble_inputs("word " * (3 + i), 480) + [no_eos],
                        f"{model}-{i}")
                for model in ("ensemble", "ensemble_aggregated") for i in range(2)]
    segfaults_before = _segfaults()
    try:
        for s in streams:
            s.start()
        assert _wait(lambda: all(s.responses >= 2 for s in streams), 120), \
            [(s.model, s.responses, s.error) for s in streams]
        stubs = children(pid)
        assert len(stubs) == 6  # preprocessing, router, prefill, decode, aggregated, postproc.
        # Triton must release its shared memory itself: pdtrt's cleanup is switched off here.
        monkeypatch.setattr(triton_server, "remove_shm_regions", lambda prefix: 0)
        start = time.monotonic()
        code = server.stop(grace_s=30)
        took_s = time.monotonic() - start
        for s in streams:
            s.join(30)
        for s in streams:
            assert not s.is_alive() and s.ended_at is not None
            assert s.ended_at - start < 5, (s.model, s.ended_at - start)
            expected = SHUTTING_DOWN if s.model == "router" else \
                f"in ensemble '{s.model}', {SHUTTING_DOWN}"
            assert s.error == expected or (s.final and s.error is None), (s.model, s.error)
        # exited by itself within the grace, not killed: the models unloaded tier by tier take
        # 10-25 s here on 2 busy cores (Triton's own parallel unload took 4-8 s)
        assert code == 0 and took_s < 30, (code, took_s)
        assert all(_gone(stub) for stub in stubs)
        log = server.log_text()
        for crash in ("Signal (11)", "Segmentation fault", "Non-graceful termination",
                      "Exit timeout expired"):
            assert crash not in log
        if segfaults_before is not None:  # the kernel log is readable here
            crashed = [line for line in (_segfaults() or set()) - segfaults_before
                       if any(f"[{stub}]" in line for stub in stubs)]
            assert crashed == []
        assert _regions(prefix) == [f"{prefix}owner.json"]  # only pdtrt's own record is left
    finally:
        server.stop()
        remove_shm_regions(prefix)


LAUNCHER = """
import json, sys, time
from pathlib import Path
from pdtrt.serve.triton_server import ServerConfig, TritonServer
tmp = Path(sys.argv[1])
server = TritonServer(ServerConfig(repository=tmp / "repo", log_path=tmp / "server.log",
                                   die_with_parent=sys.argv[2] == "attached"))
server.start(timeout_s=120)
print(json.dumps({"pid": server._proc.pid, "prefix": server.shm_prefix}), flush=True)
time.sleep(600)
"""


def _launch(tmp: Path, mode: str) -> tuple[subprocess.Popen[str], dict]:
    _echo_repo(tmp)
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp), mode],
                                stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = launcher.stdout.readline()
    assert line, "the launcher did not start its server"
    return launcher, json.loads(line)


def test_a_killed_starter_takes_its_server_and_stubs_along(tmp_path):
    launcher, server = _launch(tmp_path, "attached")
    try:
        stubs = children(server["pid"])
        assert stubs
        launcher.send_signal(signal.SIGKILL)  # as a supervisor does after its grace period
        launcher.wait(10)
        assert _wait(lambda: _gone(server["pid"]), 5), "tritonserver outlived its starter"
        assert _wait(lambda: all(_gone(s) for s in stubs), 30), "a stub outlived its server"
    finally:
        launcher.kill()
        launcher.wait(10)
        try:
            os.killpg(server["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        remove_shm_regions(server["prefix"])


def _echo_repo(tmp: Path) -> Path:
    shutil.copytree(TESTS / "triton_models" / "echo_stream", tmp / "repo" / "echo_stream")
    return tmp / "repo"


def test_the_next_start_removes_what_a_killed_server_left_and_keeps_a_live_ones(tmp_path):
    crashed = TritonServer(ServerConfig(repository=_echo_repo(tmp_path / "a"),
                                        log_path=tmp_path / "a" / "server.log"))
    crashed.start(timeout_s=120)
    live = new_shm_prefix()  # another live server's regions: this process owns them
    try:
        pid = crashed._proc.pid  # noqa: SLF001
        os.killpg(pid, signal.SIGKILL)  # server and stubs at once: nobody cleans up
        crashed._proc.wait(10)  # noqa: SLF001
        assert _wait(lambda: not children(pid), 10)
        assert len(_regions(crashed.shm_prefix)) > 1  # its regions and its owner record
        record_owners(live, [os.getpid()])
        (SHM_DIR / f"{live}0ff9e338-2516-428e-991f-e8dbc3765a6e").write_bytes(b"\0")
        with TritonServer(ServerConfig(repository=_echo_repo(tmp_path / "b"),
                                       log_path=tmp_path / "b" / "server.log")):
            assert _regions(crashed.shm_prefix) == []  # the dead server's: removed at start
            assert len(_regions(live)) == 2  # a live owner's: kept
    finally:
        crashed._proc = None  # noqa: SLF001 -- killed above; its regions go below
        for prefix in (crashed.shm_prefix, live):
            remove_shm_regions(prefix)


def test_a_detached_server_outlives_its_starter(tmp_path):
    launcher, server = _launch(tmp_path, "detached")
    try:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
        time.sleep(2)
        assert not _gone(server["pid"])
    finally:
        launcher.kill()
        launcher.wait(10)
        try:
            os.killpg(server["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait(lambda: _gone(server["pid"]), 10)
        remove_shm_regions(server["prefix"])


FAMILY = """
import os, signal, subprocess, sys, time
got = lambda *_: (print("parent got SIGTERM", flush=True), sys.exit(1))
signal.signal(signal.SIGTERM, got)
child = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: "
         "(print('stub got SIGTERM', flush=True), sys.exit(0))); print('up', flush=True); "
         "time.sleep(60)")
kids = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(2)]
time.sleep(60)
"""


def test_drain_stubs_signals_the_servers_children_only():
    """The stubs hear of the stop while the server itself still runs normally."""
    from pdtrt.serve.triton_server import drain_stubs

    parent = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True)
    try:
        up = ""  # the two children start at once: their lines may interleave ("upup\n\n")
        while up.count("up") < 2 and (line := parent.stdout.readline()):
            up += line
        assert up.count("up") == 2, up
        start = time.monotonic()
        assert drain_stubs(parent.pid, drain_s=0.5) == 2
        assert time.monotonic() - start >= 0.5  # the stubs' time to end their requests
        heard = ""  # the two stubs write at once: their lines may interleave
        while heard.count("stub got SIGTERM") < 2 and (line := parent.stdout.readline()):
            heard += line
        assert heard.count("stub got SIGTERM") == 2, heard
        assert parent.poll() is None  # the server itself was not signalled
    finally:
        for pid in children(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait(10)
