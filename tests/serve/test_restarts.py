"""A server that dies under ``pdtrt serve`` is started again on the same ports
(:mod:`pdtrt.serve.restarts`), with a stand-in ``tritonserver`` so that it runs everywhere; the
real server's restart is in tests/cli/test_serve_cmd.py."""

from __future__ import annotations

import os
import signal
import sys
import urllib.request
from pathlib import Path

import pytest

from pdtrt.errors import ServerError
from pdtrt.serve.restarts import Restarter, death_reason
from pdtrt.serve.triton_server import ServerConfig, TritonServer, set_aside
from tests.serve.test_triton_server import _SERVE, FLAKY_SERVER


def _stand_in(tmp_path: Path) -> Path:
    binary = tmp_path / "tritonserver"
    (tmp_path / "marker").write_text("no abort")
    binary.write_text(FLAKY_SERVER.format(python=sys.executable, marker=str(tmp_path / "marker"),
                                          serve=_SERVE.format(metrics_after_s=0)))
    binary.chmod(0o755)
    return binary


def _answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def test_death_reason_names_the_signal_and_the_owner_dead_abort():
    log = "...\nterminate called after throwing an instance of " \
          "'boost::interprocess::lock_exception'\nSignal (6) received.\n"
    assert death_reason(log, -6).startswith("killed by SIGABRT (boost::interprocess::")
    assert "owner-dead" in death_reason(log, -6)
    assert death_reason("", 1) == "exited with status 1"
    assert death_reason("", -99) == "killed by signal 99"
    assert death_reason("", None) == "gone"


def test_set_aside_moves_each_dead_servers_log_to_the_next_free_name(tmp_path):
    log = tmp_path / "server.log"
    assert set_aside(log, "restart") is None
    for run in ("first", "second"):
        log.write_text(run)
        set_aside(log, "restart")
    assert not log.exists()
    assert (tmp_path / "server.log.restart1").read_text() == "first"
    assert (tmp_path / "server.log.restart2").read_text() == "second"


def test_server_config_survives_the_state_file(tmp_path):
    config = ServerConfig(repository=tmp_path / "repo", log_path=tmp_path / "s.log",
                          grpc_port=1, http_port=2, metrics_port=3, env={"UCX_TLS": "tcp"},
                          backend_dir=tmp_path / "b", extra_args=("--x=1",),
                          die_with_parent=False)
    assert ServerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ServerError, match="not a server configuration"):
        ServerConfig.from_dict({"repository": "r"})


def test_restarts_are_limited_per_window(tmp_path):
    now = [0.0]
    restarter = Restarter(config=ServerConfig(repository=tmp_path, log_path=tmp_path / "s.log"),
                          endpoints=None,  # type: ignore[arg-type] -- never started here
                          max_restarts=2, window_s=100.0, clock=lambda: now[0])
    restarter.restarts += [0.0, 50.0]
    now[0] = 99.0
    assert not restarter.allowed()
    with pytest.raises(ServerError, match="not restarted: it died 2 times within 100 s"):
        restarter.restart(old_pid=2**22 + 1, old_shm_prefix="")
    now[0] = 101.0  # the first has left the window
    assert restarter.allowed()


def test_a_dead_server_comes_back_on_the_same_ports_with_its_old_log_kept(tmp_path):
    config = ServerConfig(repository=tmp_path, log_path=tmp_path / "s.log",
                          tritonserver=_stand_in(tmp_path))
    first = TritonServer(config)
    endpoints = first.start(timeout_s=30)
    spawned: list[tuple[int, str]] = []
    restarter = Restarter(config=config, endpoints=endpoints, timeout_s=30,
                          on_spawn=lambda pid, prefix: spawned.append((pid, prefix)))
    again = None
    try:
        os.kill(first.pid or 0, signal.SIGKILL)
        first._proc.wait()  # noqa: SLF001
        assert first.returncode == -signal.SIGKILL and not first.running
        (tmp_path / "s.log").write_text("the dead server's last words\n")
        again = restarter.restart(old_pid=first.pid or 0, old_shm_prefix=first.shm_prefix,
                                  returncode=first.returncode)
        assert again.running and again.pid != first.pid
        assert again.endpoints == endpoints  # the same host and ports
        assert _answers(f"http://{endpoints.http_url}/v2/health/ready")
        assert spawned == [(again.pid, again.shm_prefix)]  # named before it was ready
        assert (tmp_path / "s.log.restart1").read_text() == "the dead server's last words\n"
        assert restarter.restarts and len(restarter.restarts) == 1
    finally:
        first.stop()
        if again is not None:
            again.stop()
