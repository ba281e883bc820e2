from __future__ import annotations

import pytest
from click.testing import CliRunner

from pdtrt.cli.main import cli


@pytest.fixture
def run():
    """Invoke ``pdtrt ARGS``; returns click's Result (stdout and stderr kept apart)."""

    def _run(*args: str, **kwargs):
        return CliRunner().invoke(cli, list(args), catch_exceptions=True, **kwargs)

    return _run
