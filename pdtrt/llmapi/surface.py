"""The pinned LLM-API surface as typed data.

:func:`load_surface` reads ``pdtrt/data/targets/trtllm-1.2-llmapi.yaml`` -- every class, callable
parameter, field, attribute and enum value of TensorRT-LLM's LLM API that pdtrt's engine model
touches, each with the upstream file and commit it was read from. The contract tests hold both
``tensorrt_llm`` (when present) and the reference to it; the engine model never reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = ["SURFACE_PATH", "ClassSurface", "ParamSurface", "Surface", "load_surface"]

SURFACE_PATH = Path(__file__).resolve().parent.parent / "data" / "targets" / \
    "trtllm-1.2-llmapi.yaml"
REQUIRED = "required"


@dataclass(frozen=True, kw_only=True)
class ParamSurface:
    name: str
    kind: str  # positional | keyword | var_keyword
    default: Any = REQUIRED


@dataclass(frozen=True, kw_only=True)
class ClassSurface:
    name: str
    source_file: str
    source_commit: str
    init: tuple[ParamSurface, ...] = ()
    methods: tuple[tuple[str, tuple[ParamSurface, ...]], ...] = ()
    fields: tuple[tuple[str, Any], ...] = ()  # dataclass fields with their defaults
    attributes: tuple[str, ...] = ()
    used_keywords: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def method(self, name: str) -> tuple[ParamSurface, ...]:
        return dict(self.methods)[name]

    @property
    def names(self) -> frozenset[str]:
        """Every attribute name this class exposes on the surface."""
        return frozenset({n for n, _ in self.methods} | {n for n, _ in self.fields}
                         | set(self.attributes))


@dataclass(frozen=True, kw_only=True)
class Surface:
    pinned_version: str
    imports: tuple[tuple[str, str], ...]
    classes: tuple[ClassSurface, ...]
    enums: tuple[tuple[str, tuple[str, ...]], ...]
    stats_keys: tuple[str, ...]

    def cls(self, name: str) -> ClassSurface:
        return {c.name: c for c in self.classes}[name]

    def enum(self, name: str) -> tuple[str, ...]:
        return dict(self.enums)[name]


def _params(raw: list[dict[str, Any]]) -> tuple[ParamSurface, ...]:
    return tuple(ParamSurface(name=p["name"], kind=p["kind"], default=p.get("default", REQUIRED))
                 for p in raw)


def load_surface(path: Path = SURFACE_PATH) -> Surface:
    doc = yaml.safe_load(path.read_text())
    sources = doc["sources"]
    classes = []
    for name, raw in doc["classes"].items():
        source = sources[raw["source"]]
        classes.append(ClassSurface(
            name=name, source_file=source["file"], source_commit=source["commit"],
            init=_params(raw.get("init", [])),
            methods=tuple((m, _params(ps)) for m, ps in raw.get("methods", {}).items()),
            fields=tuple((f["name"], f.get("default")) for f in raw.get("fields", [])),
            attributes=tuple(raw.get("attributes", [])),
            used_keywords=tuple((k, tuple(v)) for k, v in raw.get("used_keywords", {}).items())))
    return Surface(pinned_version=str(doc["pinned_version"]),
                   imports=tuple(doc["imports"].items()), classes=tuple(classes),
                   enums=tuple((k, tuple(v)) for k, v in doc["enums"].items()),
                   stats_keys=tuple(doc["stats_keys"]))
