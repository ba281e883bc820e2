"""Runs test_reference_llm.py in a pytest process of its own: ucxx allows one context per
process, bound to the event loop it was created on, and that module's LLMs close their loops
(see its comment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

MODULE = Path(__file__).with_name("test_reference_llm.py")


def test_reference_llm_in_a_process_of_its_own():
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(MODULE)],
        cwd=root, env={**os.environ, "PDTRT_TEST_OWN_PROCESS": MODULE.name},
        capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-2000:]
