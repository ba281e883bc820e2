"""References between Kubernetes objects that no schema checks (step 4 of
:mod:`pdtrt.deploy.validate`): selectors that select nothing, names that name nothing.

Each check yields :class:`~pdtrt.deploy.problems.Problem` objects with the path of the
reference and what it would have needed (the labels or names that do exist), so the fix is in
the message. Only references within the given objects are checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pdtrt.deploy.problems import WORKLOAD_KINDS, Obj, Problem, ref_of

__all__ = ["reference_problems"]


@dataclass(frozen=True)
class _Pods:
    """One workload's pod template, as selectors and port names see it."""

    ref: str
    labels: dict[str, str]
    spec: dict[str, Any]

    @property
    def containers(self) -> list[dict[str, Any]]:
        return [c for c in (self.spec.get("containers") or []) + (
            self.spec.get("initContainers") or []) if isinstance(c, dict)]

    @property
    def port_names(self) -> set[str]:
        return {p.get("name") for c in self.containers for p in c.get("ports") or []
                if isinstance(p, dict) and p.get("name")}


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _pods(objects: list[Obj]) -> list[_Pods]:
    out = []
    for obj in objects:
        if obj.get("kind") in WORKLOAD_KINDS:
            template = _get(obj, "spec", "template") or {}
            out.append(_Pods(ref=ref_of(obj), labels=_get(template, "metadata", "labels") or {},
                             spec=template.get("spec") or {}))
    return out


def _matching(selector: Any, pods: list[_Pods]) -> list[_Pods]:
    if not isinstance(selector, dict) or not selector:
        return []
    return [p for p in pods if all(p.labels.get(k) == v for k, v in selector.items())]


def _labels(labels: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items()) if isinstance(labels, dict) else "{}"


def _differs(selector: dict[str, Any], labels: dict[str, str]) -> str:
    """The selector's keys whose value the labels do not have, with the labels' value."""
    return ",".join(f"{k}={labels.get(k, '<unset>')}" for k, v in selector.items()
                    if labels.get(k) != v)


def _selects(obj: Obj, path: str, selector: Any, pods: list[_Pods]) -> Iterator[Problem]:
    if not _matching(selector, pods):
        have = "; ".join(f"{p.ref} has {_differs(selector, p.labels)}" for p in pods
                         ) if isinstance(selector, dict) and selector else "an empty selector"
        yield Problem(ref_of(obj), path, f"{_labels(selector)} matches no pod template here "
                      f"({have or 'no workloads'})")


def _workload(obj: Obj, pods: list[_Pods], known: dict[str, set[str]]) -> Iterator[Problem]:
    ref = ref_of(obj)
    selector = _get(obj, "spec", "selector", "matchLabels") or {}
    pod = next(p for p in pods if p.ref == ref)
    if not selector:
        yield Problem(ref, "spec.selector.matchLabels", "empty: a workload must select its pods")
    elif any(pod.labels.get(k) != v for k, v in selector.items()):
        yield Problem(ref, "spec.selector.matchLabels", f"{_labels(selector)} does not match "
                      f"the pod template, which has {_differs(selector, pod.labels)} (the API "
                      "server refuses this)")
    base = "spec.template.spec"
    account = pod.spec.get("serviceAccountName")
    if account and account not in known["ServiceAccount"]:
        yield Problem(ref, f"{base}.serviceAccountName", f"no ServiceAccount {account!r} here")
    volumes = {v.get("name"): v for v in pod.spec.get("volumes") or [] if isinstance(v, dict)}
    for name, vol in volumes.items():
        cm = _get(vol, "configMap", "name")
        if cm and cm not in known["ConfigMap"]:
            yield Problem(ref, f"{base}.volumes.{name}", f"no ConfigMap {cm!r} here")
    for i, c in enumerate(pod.spec.get("containers") or []):
        names = {p.get("name") for p in c.get("ports") or []}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            port = _get(c, probe, "httpGet", "port")
            if isinstance(port, str) and port not in names:
                yield Problem(ref, f"{base}.containers[{i}].{probe}.httpGet.port",
                              f"no container port named {port!r} (ports: {sorted(names)})")
    for key in ("initContainers", "containers"):
        for i, c in enumerate(pod.spec.get(key) or []):
            for j, mount in enumerate(c.get("volumeMounts") or []):
                if mount.get("name") not in volumes:
                    yield Problem(ref, f"{base}.{key}[{i}].volumeMounts[{j}].name",
                                  f"no volume {mount.get('name')!r} (volumes: {sorted(volumes)})")


def _service(obj: Obj, pods: list[_Pods]) -> Iterator[Problem]:
    selector = _get(obj, "spec", "selector")
    yield from _selects(obj, "spec.selector", selector, pods)
    for i, port in enumerate(_get(obj, "spec", "ports") or []):
        target = port.get("targetPort") if isinstance(port, dict) else None
        for pod in _matching(selector, pods):
            if isinstance(target, str) and target not in pod.port_names:
                yield Problem(ref_of(obj), f"spec.ports[{i}].targetPort", f"{pod.ref} has no "
                              f"container port named {target!r} (ports: {sorted(pod.port_names)})")


def _hpa(obj: Obj, workloads: dict[tuple[str, str], Obj]) -> Iterator[Problem]:
    target = _get(obj, "spec", "scaleTargetRef") or {}
    kind, name = target.get("kind"), target.get("name")
    found = workloads.get((str(kind), str(name)))
    if found is None:
        have = sorted(f"{k}/{n}" for k, n in workloads) or ["none"]
        yield Problem(ref_of(obj), "spec.scaleTargetRef", f"no {kind}/{name} here (workloads: "
                      f"{', '.join(have)})")
    elif found.get("apiVersion") != target.get("apiVersion"):
        yield Problem(ref_of(obj), "spec.scaleTargetRef.apiVersion", f"{kind}/{name} is "
                      f"{found.get('apiVersion')}, not {target.get('apiVersion')}")
    low, high = _get(obj, "spec", "minReplicas"), _get(obj, "spec", "maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        yield Problem(ref_of(obj), "spec.minReplicas", f"{low} > maxReplicas {high}")


def _podmonitor(obj: Obj, pods: list[_Pods]) -> Iterator[Problem]:
    selector = _get(obj, "spec", "selector", "matchLabels")
    yield from _selects(obj, "spec.selector.matchLabels", selector, pods)
    for i, ep in enumerate(_get(obj, "spec", "podMetricsEndpoints") or []):
        port = ep.get("port") if isinstance(ep, dict) else None
        for pod in _matching(selector, pods):
            if port is not None and port not in pod.port_names:
                yield Problem(ref_of(obj), f"spec.podMetricsEndpoints[{i}].port", f"{pod.ref} "
                              f"has no container port named {port!r}")


def reference_problems(objects: list[Obj]) -> list[Problem]:
    pods = _pods(objects)
    known: dict[str, set[str]] = {"ServiceAccount": set(), "ConfigMap": set()}
    workloads = {}
    for obj in objects:
        name = _get(obj, "metadata", "name")
        if obj.get("kind") in known:
            known[obj["kind"]].add(name)
        if obj.get("kind") in WORKLOAD_KINDS:
            workloads[(obj["kind"], name)] = obj
    out: list[Problem] = []
    for obj in objects:
        kind = obj.get("kind")
        if kind in WORKLOAD_KINDS:
            out += _workload(obj, pods, known)
        elif kind == "Service":
            out += _service(obj, pods)
        elif kind == "PodDisruptionBudget":
            out += _selects(obj, "spec.selector.matchLabels",
                            _get(obj, "spec", "selector", "matchLabels"), pods)
        elif kind == "HorizontalPodAutoscaler":
            out += _hpa(obj, workloads)
        elif kind == "PodMonitor":
            out += _podmonitor(obj, pods)
    return out
