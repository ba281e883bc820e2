"""pdtrt drain: how the server is named, and the errors it says in one line (the drain itself:
tests/serve/test_drain.py, tests/serve/test_drain_served.py)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize(("args", "message"), [
    (["decode_b"], "give the server as --workdir DIR or --url HOST:PORT"),
    (["decode_b", "--url", "h:1", "--workdir", "w"], "give the server as --workdir DIR or "
                                                     "--url HOST:PORT"),
    (["decode_b", "--url", "h:1", "--resume", "--status"], "--resume and --status exclude "
                                                           "each other"),
    (["--url", "h:1"], "name the MODELS, or give --repository (or --workdir)"),
], ids=["no-server", "two-servers", "resume-and-status", "no-models"])
def test_usage_errors(run, args, message):
    result = run("drain", *args)
    assert result.exit_code == 2 and f"Error: {message}" in result.stderr


def test_a_work_directory_without_a_server_is_one_line_and_exit_2(run, tmp_path):
    result = run("drain", "decode_b", "--workdir", str(tmp_path), "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["message"] == f"no detached server recorded in {tmp_path} " \
                                                   "(no serve.json)"


def test_a_repository_without_engine_models_has_nothing_to_drain(run, tmp_path):
    result = run("drain", "--url", "127.0.0.1:1", "--repository", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {tmp_path} has no pdtrt engine model to drain")
