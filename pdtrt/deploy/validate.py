"""Checking Kubernetes objects offline: the API schema, custom resources, names, references.

1. **Schema** -- every built-in kind against the Kubernetes API's JSON schema of
   :data:`KUBERNETES_VERSION`, *strict* (unknown fields are errors), from the kubernetes-validate
   package (pinned in pyproject.toml; it bundles the schemas of Kubernetes 1.25-1.37).
   kubernetes-validate reports the first violation of each object.
2. **Custom resources** (PodMonitor) -- against the CRD's own schema, :mod:`pdtrt.deploy.crd`;
   their ``metadata`` against Kubernetes' ObjectMeta.
3. **Names and labels** -- what the API server checks and the schema cannot: DNS-1123 object
   names, DNS-1035 Service names, label keys and values.
4. **References between the objects** -- what no schema sees: a workload selector that does
   not match its own pod template, a Service / PodDisruptionBudget / PodMonitor selecting no
   pod, ports named by a Service, probe or PodMonitor that no container has, an autoscaler
   whose target is missing, ConfigMaps, ServiceAccounts and volumes that are not there.
   Only references *within* the set are checked (a PersistentVolumeClaim is the cluster's).

Without kubernetes-validate installed, steps 1-2 are skipped and the report says so.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pdtrt.deploy.crd import crd_errors, is_custom
from pdtrt.deploy.problems import WORKLOAD_KINDS, Obj, Problem, ref_of
from pdtrt.deploy.references import reference_problems

__all__ = ["KUBERNETES_VERSION", "Problem", "K8sValidationReport", "validate_objects"]

# The Kubernetes version whose API schema every object must satisfy: 1.33 (April 2025). Every
# API the manifests use is GA there (apps/v1, autoscaling/v2, policy/v1, startup probes,
# fsGroupChangePolicy, seccompProfile), and checking an older minor than the newest keeps them
# valid on the clusters that lag; the tests also check the newest schema the package ships.
KUBERNETES_VERSION = "1.33.0"
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, kw_only=True)
class K8sValidationReport:
    kubernetes_version: str
    objects: tuple[str, ...]  # Kind/name, in order
    problems: tuple[Problem, ...]
    schema_checked: bool  # False: kubernetes-validate is not installed (steps 1-2 skipped)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {"kubernetes_version": self.kubernetes_version, "objects": list(self.objects),
                "schema_checked": self.schema_checked,
                "problems": [p.render() for p in self.problems]}


def _path(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def schema_available() -> bool:
    return importlib.util.find_spec("kubernetes_validate") is not None


def _schema_problems(obj: Obj, version: str) -> Iterator[Problem]:
    import kubernetes_validate as kv

    ref = ref_of(obj)
    if is_custom(obj):
        for path, message in crd_errors(obj):
            yield Problem(ref, _path(path), message)
        meta = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata")}
        obj = meta  # ObjectMeta is checked as a ConfigMap's
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as exc:
        yield Problem(ref, _path(exc.path), exc.message)
    except kv.SchemaNotFoundError:
        yield Problem(ref, "apiVersion", f"Kubernetes {version} has no kind {obj.get('kind')} "
                      f"in {obj.get('apiVersion')} (and pdtrt knows no CRD schema for it)")


def _label_problems(ref: str, path: str, labels: Any) -> Iterator[Problem]:
    if not isinstance(labels, dict):
        return
    for key, value in labels.items():
        prefix, _, name = str(key).rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))) or (
                len(name) > 63 or not LABEL_NAME.match(name)):
            yield Problem(ref, f"{path}.{key}", "not a valid label key")
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            yield Problem(ref, f"{path}.{key}", f"label value {value!r} is not valid (at most "
                          "63 characters: letters, digits, '-', '_', '.', alphanumeric ends)")


def _name_problems(obj: Obj) -> Iterator[Problem]:
    ref, meta = ref_of(obj), obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        yield Problem(ref, "metadata.name", "required")
        return
    if obj.get("kind") == "Service":
        if len(name) > 63 or not DNS1035_LABEL.match(name):
            yield Problem(ref, "metadata.name", "a Service name must be a DNS-1035 label "
                          "(at most 63 characters, starting with a letter)")
    elif len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        yield Problem(ref, "metadata.name", "not a DNS-1123 subdomain")
    yield from _label_problems(ref, "metadata.labels", meta.get("labels"))
    template = (obj.get("spec") or {}).get("template")
    if obj.get("kind") in WORKLOAD_KINDS and isinstance(template, dict):
        yield from _label_problems(ref, "spec.template.metadata.labels",
                                   (template.get("metadata") or {}).get("labels"))


def validate_objects(objects: list[Obj], *,
                     kubernetes_version: str = KUBERNETES_VERSION) -> K8sValidationReport:
    """Every problem of ``objects`` (steps 1-4 of the module docstring), in object order."""
    schema = schema_available()
    problems: list[Problem] = []
    for obj in objects:
        if not isinstance(obj, dict) or not obj.get("apiVersion") or not obj.get("kind"):
            problems.append(Problem(ref_of(obj) if isinstance(obj, dict) else "<not a mapping>",
                                    "", "not a Kubernetes object (apiVersion and kind needed)"))
            continue
        if schema:
            problems += _schema_problems(obj, kubernetes_version)
        problems += _name_problems(obj)
    good = [o for o in objects if isinstance(o, dict) and o.get("kind")]
    problems += reference_problems(good)
    return K8sValidationReport(kubernetes_version=kubernetes_version,
                            objects=tuple(ref_of(o) if isinstance(o, dict) else "<not a mapping>"
                                          for o in objects),
                            problems=tuple(problems), schema_checked=schema)
