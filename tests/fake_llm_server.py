"""A real Triton server serving the ``fake_llm`` test fixture as ``ensemble`` and
``ensemble_aggregated`` (one per test session: see the ``llm_server`` fixture in conftest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.serve.triton_server import ServerConfig, TritonServer

MODELS = Path(__file__).parent / "triton_models"
SERVED_NAMES = ("ensemble", "ensemble_aggregated")

needs_triton = [
    pytest.mark.triton,
    pytest.mark.skipif(find_embedded_triton() is None,
                       reason="the embedded Triton server (nvidia-pytriton) is not installed"),
]


def start_fake_llm_server(tmp: Path) -> TritonServer:
    repo = tmp / "repo"
    for name in SERVED_NAMES:
        shutil.copytree(MODELS / "fake_llm", repo / name)
    server = TritonServer(ServerConfig(repository=repo, log_path=tmp / "server.log"))
    server.start(timeout_s=90)
    return server
