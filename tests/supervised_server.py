"""Helpers of the real-server failure tests: a supervised deployment started the operator's
way (``pdtrt serve SPEC --detach``), its Python-backend stubs found by their command line,
and its honest readiness."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import EXAMPLES

from pdtrt.engine_io import READINESS_PATH
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.launcher import STATE_FILE, stop_detached

PDTRT = str(Path(sys.executable).with_name("pdtrt"))  # the console script of this venv


def edited_example(workdir: Path, name: str, edit: Callable[[dict], None]) -> Path:
    """The reference-cpu example spec, changed by ``edit`` (in place), written to
    ``workdir/name``."""
    spec = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    edit(spec)
    path = workdir / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def serve_detached(spec: Path, engines_root: Path, workdir: Path, *,
                   timeout_s: float = 300, env: dict[str, str] | None = None,
                   extra_args: tuple[str, ...] = ()) -> dict:
    """``pdtrt serve SPEC --detach --json --timeout TIMEOUT_S`` (then ``extra_args``): the
    command's JSON (endpoints, readiness, state), plus the state file's content under
    ``"state_file"``. The command has twice ``timeout_s`` in all (its build first), so that one
    whose deployment does not get ready gives up and stops its server itself rather than being
    killed and leaving that server behind. Skips without the embedded Triton server or ucxx."""
    if find_embedded_triton() is None or importlib.util.find_spec("ucxx") is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton) and ucxx")
    out = subprocess.run([PDTRT, "serve", str(spec), "--engines-dir", str(engines_root),
                          "--workdir", str(workdir), "--detach", "--json",
                          "--timeout", f"{timeout_s:g}", *extra_args],
                         capture_output=True, text=True, timeout=2 * timeout_s,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, f"pdtrt serve: {out.stderr}{out.stdout}"
    info = json.loads(out.stdout)
    info["state_file"] = json.loads((workdir / STATE_FILE).read_text())
    return info


def stop(workdir: Path) -> None:
    """``pdtrt stop`` of a deployment that may have been stopped already."""
    if (workdir / STATE_FILE).is_file():
        stop_detached(workdir)


def stubs_of(repository: Path, model: str = "") -> list[int]:
    """Pids of the Python-backend stubs of ``model`` (every model's, when "") in *this*
    repository (never another's)."""
    script = f"{repository}/{model}/1/model.py".encode() if model else f"{repository}/".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[0].endswith(b"triton_python_backend_stub") and len(argv) > 1 and (
                    argv[1] == script or not model and argv[1].startswith(script)):
                pids.append(int(entry.name))
    return pids


def kill_model(repository: Path, model: str) -> list[int]:
    """SIGKILL ``model``'s stubs, as an OOM kill or a crash would."""
    pids = stubs_of(repository, model)
    assert pids, f"no stub of {model} under {repository}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return pids


def readiness(http_url: str) -> int:
    """The HTTP status of the deployment's readiness (``READINESS_PATH``); 0 when nothing
    answers."""
    try:
        with urllib.request.urlopen(f"http://{http_url}{READINESS_PATH}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0  # no answer: a server that is down (or restarting) is not ready


# Triton 2.51's server aborts now and then on a decoupled response's shared-memory mutex that
# a dead thread or process held (EOWNERDEAD; docs/design/serve.md, "owner-dead mutex")
TRITON_ABORT = "boost::interprocess::lock_exception"


def server_pid(workdir: Path) -> int:
    """The pid of the server the state file names now (the supervisor may have restarted
    it)."""
    return int(json.loads((workdir / STATE_FILE).read_text())["pid"])


def restarted_after_abort(workdir: Path, pid: int) -> bool:
    """Whether the server ``pid`` aborted the Triton 2.51 way and the supervisor restarted it
    (the dead server's log is kept as ``server.log.restartN``)."""
    logs = sorted(workdir.glob("server.log.restart*"))
    return server_pid(workdir) != pid and any(
        TRITON_ABORT in p.read_text(errors="replace") for p in logs)


def kernel_log() -> list[str]:
    """The kernel log's lines (``dmesg``); skips the test when it cannot be read."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the kernel log cannot be read (dmesg: {exc})")
    if out.returncode != 0:
        pytest.skip(f"the kernel log cannot be read (dmesg: {out.stderr.strip()})")
    return out.stdout.splitlines()


def stub_faults(before: list[str], pids: set[int]) -> list[str]:
    """The kernel log's lines since ``before`` (a :func:`kernel_log`) about a fault of one of
    the stubs ``pids`` (a segfault, a trap: ``triton_python_b[PID]: ...``)."""
    seen = set(before)
    return [line for line in kernel_log() if line not in seen
            and any(f"triton_python_b[{pid}]" in line for pid in pids)]
