"""A clock a test moves by hand, for code that takes ``clock=`` (a ``time.monotonic`` stand-in).

Time stands still until :meth:`FakeClock.advance`, so a test that needs time to pass says how
much instead of sleeping. Safe to read and advance from any thread (a scripted phase runs on a
reader thread).
"""

from __future__ import annotations

import threading


class FakeClock:
    def __init__(self, start_s: float = 1000.0) -> None:
        """``start_s``: far from 0.0, where an endpoint's "never happened" times stand."""
        self._now_s = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now_s += seconds
