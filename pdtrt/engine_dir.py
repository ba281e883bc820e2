"""What an engine directory tells its readers: the manifest's file name and the KV layout.

``pdtrt build`` writes an engine directory and its manifest (:mod:`pdtrt.blueprint.manifest`, a
pydantic model); the engine models inside Triton's stubs read it back. The two facts both sides
share live here, in plain Python, so a stub reads them without loading the build stage:

- :data:`MANIFEST_NAME`, the file beside the engine (``pdtrt-engine.json``);
- :class:`KVLayout`, what one token's KV cache looks like across the whole model -- the facts a
  prefill and a decode engine must share to hand a request's KV cache over, and its
  :meth:`~KVLayout.fingerprint`, which both phases compare.

:func:`build_setting` reads one resolved build setting from a manifest without validating the
rest (the engine model needs ``max_beam_width`` and nothing else).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from pdtrt.enums import KVDType

__all__ = ["MANIFEST_NAME", "KVLayout", "build_setting"]

MANIFEST_NAME = "pdtrt-engine.json"


@dataclass(frozen=True, kw_only=True)
class KVLayout:
    """What the KV cache of one token looks like across the whole model (not per rank)."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    kv_dtype: KVDType
    tokens_per_block: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "tokens_per_block"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"KV layout {name} must be an integer >= 1, got {value!r}")
        object.__setattr__(self, "kv_dtype", KVDType(self.kv_dtype))

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "kv_dtype": str(self.kv_dtype)}

    def fingerprint(self) -> str:
        """Short stable hash of the layout; equal layouts have equal fingerprints."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def build_setting(engine_dir: Path, name: str, default: int) -> int:
    """The resolved build setting ``name`` of the engine in ``engine_dir`` (its manifest's
    ``build_settings.settings.<name>.value``), ``default`` when the manifest does not say."""
    manifest = json.loads((engine_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    settings = manifest.get("build_settings", {}).get("settings", {})
    value = settings.get(name, {}) if isinstance(settings, dict) else {}
    return int(value.get("value", default)) if isinstance(value, dict) else default
