"""Runs test_smollm2_llm.py in a pytest process of its own (ucxx's one context per process, see
test_reference_llm_process.py), on SmolLM2 built once per session (needs PyPI once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).with_name("test_smollm2_llm.py")


@pytest.mark.slow
def test_smollm2_llm_in_a_process_of_its_own(smollm2_engines):
    root, dep, _cache = smollm2_engines
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(MODULE)],
        cwd=repo, env={**os.environ, "PDTRT_TEST_OWN_PROCESS": MODULE.name,
                       "PDTRT_TEST_SMOLLM2_DIR": str(root / dep.spec.name)},
        capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout, done.stdout[-2000:]
