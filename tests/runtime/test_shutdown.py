"""ShutdownWatch in a process of its own: SIGTERM runs the callback at once, on its thread,
while the main thread is busy elsewhere, and does not end the process (as in a stub)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pdtrt.runtime.shutdown import ParentWatch
from tests.conftest import ROOT

CHILD = """
import sys, threading, time
from pdtrt.runtime.shutdown import ShutdownWatch
stopped = threading.Event()
print(ShutdownWatch(lambda: (print("drained on", threading.current_thread().name, flush=True),
                             stopped.set())).install(), flush=True)
time.sleep(30)  # the main thread is busy (the stub's sits in C++), yet the callback runs
"""


def test_sigterm_runs_the_drain_at_once_and_the_process_lives_on():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "True"
        start = time.monotonic()
        child.send_signal(signal.SIGTERM)
        assert child.stdout.readline().strip() == "drained on pdtrt-sigterm"
        assert time.monotonic() - start < 5
        time.sleep(0.2)
        assert child.poll() is None  # SIGTERM did not end it: the server finalizes it later
    finally:
        child.kill()
        child.wait(10)


def test_off_the_main_thread_it_declines():
    code = ("import threading; from pdtrt.runtime.shutdown import ShutdownWatch; r = [];"
            "t = threading.Thread(target=lambda: r.append(ShutdownWatch(print).install()));"
            "t.start(); t.join(); print(r[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "False"


ORPHAN = """
import ctypes, os, threading, time
from pdtrt.runtime.shutdown import ParentWatch
threading.Thread(target=time.sleep, args=(60,)).start()  # a non-daemon thread, as an engine's
ParentWatch(interval_s=0.1).start()
print(os.getpid(), flush=True)
ctypes.PyDLL(None).sleep(60)  # blocked in C with the GIL held, as a stub waiting on its server
"""


def test_a_process_whose_parent_died_exits_though_its_threads_run_on():
    """The stub's server died: the stub (here the child of a shell that exits when told) ends
    within seconds, though it holds the GIL for good and has a non-daemon thread."""
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" </dev/null & read x',
                              ORPHAN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=ROOT)
    pid = int(shell.stdout.readline())  # printed once its ParentWatch runs
    try:
        shell.communicate("go\n", timeout=30)  # the shell exits: its child is re-parented
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), "the orphaned process kept running"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Running, not a zombie left for a reaper."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_the_parent_watch_outlives_the_sigterm_of_its_process_group():
    """An orderly stop sends SIGTERM to the server's whole process group, the watches
    included: a watch must not die of it, or its stub goes unguarded when the server is then
    killed."""
    watched = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               process_group=0)
    watch = subprocess.Popen(["sh", "-c", ParentWatch.SCRIPT, "pdtrt-parent-watch",
                              str(os.getpid()), str(watched.pid), "0.1"],
                             process_group=watched.pid)
    try:
        time.sleep(0.5)
        os.killpg(watched.pid, signal.SIGTERM)  # the group: the watched process and its watch
        time.sleep(0.5)
        assert watch.poll() is None, "the watch died of the group's SIGTERM"
    finally:
        for proc in (watch, watched):
            proc.kill()
            proc.wait(10)


def test_a_stop_knows_a_parent_watch_and_its_sleep_from_a_stub():
    """The orderly stop does not report a stub's parent watch (nor its ``sleep``) as a stub left
    running: it ignores the group's SIGTERM and ends by itself after its stub."""
    from pdtrt.runtime.shutdown import PARENT_WATCH_NAME
    from pdtrt.serve.procs import children, is_parent_watch

    watched = subprocess.Popen(["sleep", "30"])
    watch = subprocess.Popen(["sh", "-c", ParentWatch.SCRIPT, PARENT_WATCH_NAME,
                              str(os.getpid()), str(watched.pid), "5"])
    try:
        deadline = time.monotonic() + 5
        while not children(watch.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        [sleep] = children(watch.pid)
        assert is_parent_watch(watch.pid) and is_parent_watch(sleep)
        assert not is_parent_watch(watched.pid) and not is_parent_watch(os.getpid())
    finally:
        for p in (watch, watched):
            p.kill()
            p.wait()
