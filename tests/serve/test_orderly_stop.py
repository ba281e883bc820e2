"""Stopping a server in order (issue 49): the tiers, each waited for by its stubs, and the stubs
that outlast the deadline killed and named -- with a fake model control and stub table."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from pdtrt.errors import ServerError
from pdtrt.serve.model_control import ModelState, server_stubs
from pdtrt.serve.orderly_stop import FRONT_TIER_S, stop_tiers, unload_in_order

ROLES = {"router": "router", "preprocessing": "preprocessing",
         "postprocessing": "postprocessing", "prefill": "prefill", "decode": "decode",
         "aggregated": "aggregated"}


def _repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    for name, role in ROLES.items():
        (repo / name).mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\n'
            f'parameters {{ key: "pdtrt_role" value {{ string_value: "{role}" }} }}\n')
    for name in ("ensemble", "ensemble_aggregated"):
        (repo / name).mkdir()
        (repo / name / "config.pbtxt").write_text(f'name: "{name}"\nplatform: "ensemble"\n')
    (repo / "health").mkdir()
    (repo / "health" / "config.pbtxt").write_text('name: "health"\nbackend: "python"\n')
    (repo / "other").mkdir()
    (repo / "other" / "config.pbtxt").write_text('name: "other"\nbackend: "python"\n')
    return repo


def test_tiers_put_the_front_first_and_the_engines_last(tmp_path):
    repo = _repo(tmp_path)
    models = sorted(p.name for p in repo.iterdir())
    assert stop_tiers(models, repo) == [
        ("ensemble", "ensemble_aggregated", "health", "postprocessing", "preprocessing",
         "router"),
        ("aggregated", "decode", "other", "prefill"),
    ]


def test_tiers_without_a_readable_repository_unload_everything_at_once(tmp_path):
    assert stop_tiers(["b", "a"], tmp_path / "gone") == [("b", "a")]


class _Server:
    """A fake server: model control and stub table. A stub exits ``polls`` looks after its
    model was unloaded, unless its model is in ``stuck``."""

    def __init__(self, stubs: dict[int, str], *, polls: int = 2, stuck=(), refuse=()) -> None:
        self.stubs, self.polls, self.stuck, self.refuse = dict(stubs), polls, stuck, refuse
        self.events: list[str] = []
        self._unloaded: dict[str, int] = {}

    def states(self) -> dict[str, ModelState]:
        return {m: ModelState.READY for m in [*self.stubs.values(), "ensemble", "health"]} | {
            "unloaded_before": ModelState.UNAVAILABLE}

    def load(self, model: str) -> None:
        raise AssertionError("a stop loads nothing")

    def unload(self, model: str) -> None:
        self.events.append(f"unload {model}")
        if model in self.refuse:
            raise ServerError("HTTP 400: refused")
        self._unloaded[model] = 0

    def table(self, server_pid: int) -> dict[int, str]:
        assert server_pid == 42
        for model in list(self._unloaded):
            self._unloaded[model] += 1
            if self._unloaded[model] > self.polls and model not in self.stuck:
                for pid in [p for p, m in self.stubs.items() if m == model]:
                    del self.stubs[pid]
                    self.events.append(f"exit {model}")
                del self._unloaded[model]
        return dict(self.stubs)


def test_each_tier_is_unloaded_after_the_stubs_of_the_one_before_exited(tmp_path):
    server = _Server({11: "router", 12: "preprocessing", 13: "decode", 14: "prefill"})
    killed = unload_in_order(server, server_pid=42, repository=_repo(tmp_path),
                             deadline=float("inf"), stubs=server.table)
    assert killed == {}
    assert server.events == [
        "unload router", "unload preprocessing", "unload ensemble", "unload health",
        "exit router", "exit preprocessing",
        "unload decode", "unload prefill", "exit decode", "exit prefill",
    ]
    assert "unloaded_before" not in " ".join(server.events)  # only loaded models


def test_stubs_left_at_the_deadline_are_killed_and_logged(tmp_path, caplog):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server = _Server({sleeper.pid: "decode", 12: "router"}, stuck=("decode",))
        clock = iter(range(100))
        with caplog.at_level(logging.WARNING, logger="pdtrt.serve.orderly_stop"):
            killed = unload_in_order(server, server_pid=42, repository=_repo(tmp_path),
                                     deadline=20, clock=lambda: next(clock),
                                     stubs=server.table)
        assert killed == {sleeper.pid: "decode"}
        assert sleeper.wait(5) == -9  # SIGKILL
        assert f"the stub of decode (pid {sleeper.pid}) has not exited" in caplog.text
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_front_model_triton_holds_does_not_keep_the_engines_waiting(tmp_path, caplog):
    """After a router was killed, Triton 2.51 keeps its ensemble requests -- and with them the
    tokenizers -- forever: the front is given FRONT_TIER_S, then the engines are unloaded in
    order and have the rest of the deadline; the held stub is killed at the end."""
    server = _Server({11: "router", 12: "preprocessing", 13: "decode"},
                     stuck=("preprocessing",))
    clock = iter(range(1000))  # a second per look
    with caplog.at_level(logging.WARNING, logger="pdtrt.serve.orderly_stop"), \
            pytest.MonkeyPatch.context() as mp:
        killed_pids: list[int] = []
        mp.setattr("os.kill", lambda pid, sig: killed_pids.append(pid))
        mp.setattr("pdtrt.serve.orderly_stop._POLL_S", 0.0)
        killed = unload_in_order(server, server_pid=42, repository=_repo(tmp_path),
                                 deadline=1000, clock=lambda: next(clock),
                                 stubs=server.table)
    assert server.events[-2:] == ["unload decode", "exit decode"]  # not left to the deadline
    assert FRONT_TIER_S <= next(clock) < FRONT_TIER_S + 10  # the front's wait, then the engines'
    assert killed == {12: "preprocessing"} and killed_pids == [12]
    assert "the stub of preprocessing (pid 12) has not exited" in caplog.text


def test_an_unload_the_server_refuses_is_logged_and_the_stop_goes_on(tmp_path, caplog):
    server = _Server({11: "router", 13: "decode"}, refuse=("router",), stuck=("router",))
    clock = iter(range(100))
    with caplog.at_level(logging.WARNING, logger="pdtrt.serve.orderly_stop"), \
            pytest.MonkeyPatch.context() as mp:
        mp.setattr("os.kill", lambda pid, sig: None)  # pid 11 is no stub of ours
        killed = unload_in_order(server, server_pid=42, repository=_repo(tmp_path),
                                 deadline=10, clock=lambda: next(clock), stubs=server.table)
    assert "unloading router: HTTP 400: refused" in caplog.text
    assert server.events[-2:] == ["unload decode", "exit decode"]  # not waiting for router
    assert killed == {11: "router"}


def test_server_stubs_are_the_servers_stub_children_by_model(tmp_path):
    """Read from /proc: a child running ``triton_python_backend_stub <repo>/<model>/1/model.py``
    counts, another child does not."""
    stub = tmp_path / "triton_python_backend_stub"
    stub.symlink_to(Path(sys.executable))
    script = tmp_path / "repo" / "decode" / "1" / "model.py"
    script.parent.mkdir(parents=True)
    script.write_text("import time; time.sleep(60)\n")
    code = ("import subprocess, sys, time\n"
            f"subprocess.Popen([{str(stub)!r}, {str(script)!r}])\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        found: dict[int, str] = {}
        for _ in range(100):
            if (found := server_stubs(parent.pid)):
                break
            subprocess.run(["sleep", "0.05"], check=True)
        assert list(found.values()) == ["decode"]
    finally:
        import os
        import signal

        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
