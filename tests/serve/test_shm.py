"""Owner records of the servers' shared memory: the regions of a server that no longer runs go
at the next start; a live server's, and those nobody can judge, stay (a tmp dir stands in for
/dev/shm)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pdtrt.serve.shm import new_shm_prefix, record_owners, remove_stale_shm_regions


def _regions(shm_dir, prefix):
    for name in ("0ff9e338-2516-428e-991f-e8dbc3765a6e", "2f9eedbb-df51-460f-90d4-7a350b24703f"):
        (shm_dir / f"{prefix}{name}").write_bytes(b"\0" * 16)


def _names(shm_dir, prefix):
    return sorted(p.name for p in shm_dir.glob(f"{prefix}*"))


@pytest.fixture(scope="module")
def dead_pid():
    """The pid of a process that has ended (and its start time, read while it ran)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    from pdtrt.serve.procs import start_ticks

    start = start_ticks(child.pid)
    child.communicate(b"")
    return child.pid, start


def test_the_regions_of_a_server_that_ended_go_and_a_live_ones_stay(tmp_path, dead_pid):
    dead, live = new_shm_prefix(), new_shm_prefix()
    _regions(tmp_path, dead)
    _regions(tmp_path, live)
    record_owners(live, [os.getpid()], tmp_path)
    record = {"owners": [{"pid": dead_pid[0], "start": dead_pid[1]}],
              "pid_namespace": os.readlink("/proc/self/ns/pid")}
    (tmp_path / f"{dead}owner.json").write_text(json.dumps(record))
    assert remove_stale_shm_regions(tmp_path) == [dead]
    assert _names(tmp_path, dead) == []
    assert len(_names(tmp_path, live)) == 3  # two regions and the record


def test_one_live_owner_is_enough(tmp_path, dead_pid):
    prefix = new_shm_prefix()
    _regions(tmp_path, prefix)
    record_owners(prefix, [os.getpid()], tmp_path)
    record = json.loads((tmp_path / f"{prefix}owner.json").read_text())
    record["owners"].insert(0, {"pid": dead_pid[0], "start": dead_pid[1]})  # the starter left
    (tmp_path / f"{prefix}owner.json").write_text(json.dumps(record))
    assert remove_stale_shm_regions(tmp_path) == [] and len(_names(tmp_path, prefix)) == 3


def test_a_reused_pid_does_not_keep_a_dead_servers_regions(tmp_path):
    prefix = new_shm_prefix()
    _regions(tmp_path, prefix)
    record_owners(prefix, [os.getpid()], tmp_path)
    record = json.loads((tmp_path / f"{prefix}owner.json").read_text())
    record["owners"][0]["start"] -= 1  # this pid, but another process than the recorded one
    (tmp_path / f"{prefix}owner.json").write_text(json.dumps(record))
    assert remove_stale_shm_regions(tmp_path) == [prefix] and _names(tmp_path, prefix) == []


@pytest.mark.parametrize("record", [
    None, "not json", {"owners": [{"pid": 1, "start": 0}], "pid_namespace": "pid:[1]"},
    {"owners": [], "pid_namespace": "same"}],
    ids=["no-record", "unreadable", "another-pid-namespace", "no-owners"])
def test_regions_nobody_can_judge_are_kept(tmp_path, record):
    prefix = new_shm_prefix()
    _regions(tmp_path, prefix)
    if record is not None:
        if isinstance(record, dict) and record["pid_namespace"] == "same":
            record["pid_namespace"] = os.readlink("/proc/self/ns/pid")
        text = record if isinstance(record, str) else json.dumps(record)
        (tmp_path / f"{prefix}owner.json").write_text(text)
    assert remove_stale_shm_regions(tmp_path) == []
    assert len(_names(tmp_path, prefix)) == 2 + (record is not None)


def test_other_names_are_never_touched(tmp_path, dead_pid):
    record = {"owners": [{"pid": dead_pid[0], "start": dead_pid[1]}],
              "pid_namespace": os.readlink("/proc/self/ns/pid")}
    for name in ("pdtrt_xyz_owner.json", "other_0123456789ab_owner.json", "unrelated"):
        (tmp_path / name).write_text(json.dumps(record))
    assert remove_stale_shm_regions(tmp_path) == []
    assert len(list(tmp_path.iterdir())) == 3
