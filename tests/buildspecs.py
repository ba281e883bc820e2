"""Variants of the example specs for build tests (written to a temporary directory)."""

from __future__ import annotations

import copy
import json
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


def make_hub_snapshot(cache: Path, repo_id: str, *, shards: int = 2, present: int | None = None,
                      rev: str = "a" * 40) -> Path:
    """A Hub cache entry as huggingface_hub writes it: blobs, a snapshot of links, refs/main."""
    folder = cache / ("models--" + repo_id.replace("/", "--"))
    snap, blobs = folder / "snapshots" / rev, folder / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    files = {"config.json": '{"model_type": "llama"}',
             "model.safetensors.index.json": json.dumps(
                 {"weight_map": {f"w{i}": n for i, n in enumerate(names)}}),
             **{n: "w" for n in names[:present if present is not None else shards]}}
    for i, (name, text) in enumerate(files.items()):
        (blobs / f"blob{i}").write_text(text)
        (snap / name).symlink_to(Path("../../blobs") / f"blob{i}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(rev)
    return snap
