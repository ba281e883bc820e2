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


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite the golden files under tests/golden/ instead of comparing.")


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))
