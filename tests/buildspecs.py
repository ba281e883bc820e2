"""Variants of the example specs for build tests (written to a temporary directory)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import yaml
from conftest import BUILTIN_MODELS, EXAMPLES


def seed_data() -> dict:
    return yaml.safe_load((EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text())


def fake_hf_checkpoint(tmp: Path) -> Path:
    """``tmp/hf``: Llama-3.1-8B's config.json and one (fake) weights file."""
    hf = tmp / "hf"
    hf.mkdir()
    shutil.copy(BUILTIN_MODELS / "meta-llama--Meta-Llama-3.1-8B.json", hf / "config.json")
    (hf / "model-00001-of-00004.safetensors").write_bytes(b"w")
    return hf


def write_spec(tmp: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def variant(edit) -> dict:
    data = copy.deepcopy(seed_data())
    edit(data)
    return data
