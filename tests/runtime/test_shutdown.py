"""ShutdownWatch in a process of its own: SIGTERM runs the callback at once, on its thread,
while the main thread is busy elsewhere, and does not end the process (as in a stub)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

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
