"""Fake executables that record their argv (NUL-separated) and environment, for launch tests.

``install_recorders(tmp, tools)`` writes ``tmp/bin/<tool>`` for each tool and returns the
environment that puts them first on ``PATH``; ``run_recorded`` runs a script there and returns
what ``tool`` was called with last (its environment is in ``RECORD_DIR/<tool>.env``);
``recorded_calls`` every call, in order.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

_RECORDER = ('#!/bin/sh\nprintf "%s\\0" "$@" > "$RECORD_DIR/$(basename "$0")"\n'
             'printf "%s\\0" "$@" "" >> "$RECORD_DIR/$(basename "$0").calls"\n'
             'env > "$RECORD_DIR/$(basename "$0").env"\n')


def install_recorders(tmp_path: Path, tools: tuple[str, ...]) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text(_RECORDER)
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "record").mkdir()
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "RECORD_DIR": str(tmp_path / "record")}


def run_recorded(script: Path, args: list[str], env: dict[str, str], tool: str) -> list[str]:
    done = subprocess.run(["bash", str(script), *args], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    record = Path(env["RECORD_DIR"]) / tool
    return record.read_text().split("\0")[:-1]


def recorded_calls(env: dict[str, str], tool: str) -> list[list[str]]:
    """Every call of ``tool``, in order (each call's argv ends with an empty field)."""
    fields = (Path(env["RECORD_DIR"]) / f"{tool}.calls").read_text().split("\0")[:-1]
    calls, argv = [], []
    for field in fields:
        if field == "":
            calls.append(argv)
            argv = []
        else:
            argv.append(field)
    return calls
