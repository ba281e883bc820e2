"""Custom resources pdtrt writes, checked against their CRDs' own schemas, offline.

The Kubernetes API schema (kubernetes-validate) has no custom resources. For the Prometheus
operator's ``PodMonitor`` pdtrt keeps the CRD's OpenAPI v3 schema as data
(``pdtrt/data/k8s/podmonitor-v0.93.0.yaml``, with its source and version) and checks the
object's ``spec`` against it with jsonschema, made *strict* first: every object schema that
lists its properties and does not say ``x-kubernetes-preserve-unknown-fields`` gets
``additionalProperties: false``, so an unknown field is reported the way the API server's
strict field validation (``kubectl apply``'s default) rejects it. The object's ``metadata`` is
an ObjectMeta like any other and is checked by the caller against the Kubernetes schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["CRD_SCHEMAS", "crd_errors", "is_custom"]

# (apiVersion, kind) -> the schema file under pdtrt/data/k8s/
CRD_SCHEMAS = {("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-v0.93.0.yaml"}


def is_custom(obj: dict[str, Any]) -> bool:
    return (obj.get("apiVersion"), obj.get("kind")) in CRD_SCHEMAS


def _strict(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def _schema(filename: str) -> dict[str, Any]:
    text = resources.files("pdtrt").joinpath(f"data/k8s/{filename}").read_text(encoding="utf-8")
    schema = _strict(yaml.safe_load(text))
    schema["properties"]["metadata"] = {"type": "object"}  # checked as an ObjectMeta elsewhere
    return schema


def crd_errors(obj: dict[str, Any]) -> Iterator[tuple[list[str | int], str]]:
    """(path, message) of every way ``obj`` breaks its CRD's schema (``obj`` is custom)."""
    import jsonschema  # installed with kubernetes-validate (the dev extra)

    schema = _schema(CRD_SCHEMAS[(obj["apiVersion"], obj["kind"])])
    validator = jsonschema.Draft7Validator(schema)
    for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path))):
        yield list(err.path), err.message
