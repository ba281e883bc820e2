"""Variants of the example specs for build tests (written to a temporary directory)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from conftest import EXAMPLES


def seed_data() -> dict:
    return yaml.safe_load((EXAMPLES / "llama3-8b-h100-l40s.yaml").read_text())


def write_spec(tmp: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def variant(edit) -> dict:
    data = copy.deepcopy(seed_data())
    edit(data)
    return data
