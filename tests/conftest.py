"""Shared fixtures: paths to the repository, the shared model configs, the example specs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
# ../shared/data/models holds real HF config.json files; pdtrt ships copies as built-ins.
SHARED_MODELS = ROOT.parent / "shared" / "data" / "models"
BUILTIN_MODELS = ROOT / "pdtrt" / "data" / "models"


@pytest.fixture(scope="session")
def catalog():
    from pdtrt.catalog import load_catalog

    return load_catalog()


def models_dir() -> Path:
    """The shared configs when present (they are the source), else pdtrt's built-in copies."""
    return SHARED_MODELS if SHARED_MODELS.is_dir() else BUILTIN_MODELS


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """One real Triton server for the session, serving the ``fake_llm`` test fixture (not an
    LLM) as ``ensemble`` and ``ensemble_aggregated``; yields its gRPC URL."""
    from fake_llm_server import start_fake_llm_server

    server = start_fake_llm_server(tmp_path_factory.mktemp("llm_server"))
    try:
        assert server.endpoints is not None
        yield server.endpoints.grpc_url
    finally:
        server.stop()
