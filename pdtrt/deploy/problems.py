"""One problem found in a set of Kubernetes objects, and how objects are named in messages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["WORKLOAD_KINDS", "Obj", "Problem", "ref_of"]

Obj = dict[str, Any]
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


@dataclass(frozen=True)
class Problem:
    ref: str  # Kind/name
    path: str  # dotted, with [i] for list items; "" for the object itself
    message: str

    def render(self) -> str:
        return f"{self.ref}: {self.path or '<object>'}: {self.message}"


def ref_of(obj: Obj) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{obj.get('kind', '<no kind>')}/{name or '<no name>'}"
