"""Offline validation: the generated objects pass against the pinned Kubernetes schema; every
seeded defect is caught with its object, path and a message that says what is wrong."""

from __future__ import annotations

import kubernetes_validate
import pytest

from pdtrt.deploy.validate import KUBERNETES_VERSION, validate_objects
from tests.deploy.conftest import EXAMPLE_NAMES, find

REF = "reference-cpu"


@pytest.mark.parametrize("version", [KUBERNETES_VERSION, kubernetes_validate.latest_version()],
                         ids=["pinned", "newest"])
@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_generated_objects_are_valid(objects, example, version):
    report = validate_objects(objects(example), kubernetes_version=version)
    assert report.schema_checked
    assert [p.render() for p in report.problems] == []
    assert len(report.objects) == 16


def test_the_pinned_version_is_one_the_package_ships():
    assert KUBERNETES_VERSION in kubernetes_validate.utils.all_versions()


def _mutate(objs, kind, name, path, value):
    node = find(objs, kind, name)
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


CONTAINER = ("spec", "template", "spec", "containers", 0)
# (id, kind, name, path to set, value, every problem expected)
DEFECTS = [
    ("unknown-field", "Deployment", "reference-cpu-decode", (*CONTAINER, "imagePullPolicyy"),
     "Always", ["Deployment/reference-cpu-decode: spec.template.spec.containers[0]: Additional "
                "properties are not allowed ('imagePullPolicyy' was unexpected)"]),
    ("wrong-type", "Service", "reference-cpu-prefill", ("spec", "ports", 0, "port"), "8001",
     ["Service/reference-cpu-prefill: spec.ports[0].port: '8001' is not of type 'integer'"]),
    ("service-selects-nothing", "Service", "reference-cpu-decode",
     ("spec", "selector", "app.kubernetes.io/component"), "decoder",
     ["Service/reference-cpu-decode: spec.selector: app.kubernetes.io/name=pdtrt,"
      "app.kubernetes.io/instance=reference-cpu,app.kubernetes.io/component=decoder matches no "
      "pod template here (Deployment/reference-cpu-front has app.kubernetes.io/component=front; "
      "Deployment/reference-cpu-prefill has app.kubernetes.io/component=prefill; "
      "Deployment/reference-cpu-decode has app.kubernetes.io/component=decode)"]),
    ("hpa-target-missing", "HorizontalPodAutoscaler", "reference-cpu-decode",
     ("spec", "scaleTargetRef", "name"), "reference-cpu-decoder",
     ["HorizontalPodAutoscaler/reference-cpu-decode: spec.scaleTargetRef: no "
      "Deployment/reference-cpu-decoder here (workloads: Deployment/reference-cpu-decode, "
      "Deployment/reference-cpu-front, Deployment/reference-cpu-prefill)"]),
    ("hpa-bounds", "HorizontalPodAutoscaler", "reference-cpu-prefill", ("spec", "minReplicas"),
     3, ["HorizontalPodAutoscaler/reference-cpu-prefill: spec.minReplicas: 3 > maxReplicas 2"]),
    ("selector-vs-template", "Deployment", "reference-cpu-front",
     ("spec", "selector", "matchLabels", "app.kubernetes.io/component"), "frontend",
     ["Deployment/reference-cpu-front: spec.selector.matchLabels: app.kubernetes.io/name=pdtrt,"
      "app.kubernetes.io/instance=reference-cpu,app.kubernetes.io/component=frontend does not "
      "match the pod template, which has app.kubernetes.io/component=front (the API server "
      "refuses this)"]),
    ("podmonitor-unknown-field", "PodMonitor", "reference-cpu",
     ("spec", "podMetricsEndpoints", 0, "intervall"), "15s",
     ["PodMonitor/reference-cpu: spec.podMetricsEndpoints[0]: Additional properties are not "
      "allowed ('intervall' was unexpected)"]),
    ("podmonitor-wrong-type", "PodMonitor", "reference-cpu", ("spec", "podTargetLabels"), "x",
     ["PodMonitor/reference-cpu: spec.podTargetLabels: 'x' is not of type 'array'"]),
    ("podmonitor-bad-interval", "PodMonitor", "reference-cpu",
     ("spec", "podMetricsEndpoints", 0, "interval"), "15 seconds",
     ["PodMonitor/reference-cpu: spec.podMetricsEndpoints[0].interval: '15 seconds' does not "
      "match '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
      "(([0-9]+)ms)?)$'"]),
    ("podmonitor-metadata", "PodMonitor", "reference-cpu", ("metadata", "label"), {},
     ["PodMonitor/reference-cpu: metadata: Additional properties are not allowed ('label' was "
      "unexpected)"]),
    ("podmonitor-port", "PodMonitor", "reference-cpu",
     ("spec", "podMetricsEndpoints", 0, "port"), "prom",
     [f"PodMonitor/reference-cpu: spec.podMetricsEndpoints[0].port: Deployment/{REF}-{role} "
      "has no container port named 'prom'" for role in ("front", "prefill", "decode")]),
    ("label-value", "Deployment", "reference-cpu-front", ("metadata", "labels", "tier"),
     "front end", ["Deployment/reference-cpu-front: metadata.labels.tier: label value 'front "
                   "end' is not valid (at most 63 characters: letters, digits, '-', '_', '.', "
                   "alphanumeric ends)"]),
    ("service-name", "Service", "reference-cpu", ("metadata", "name"), "9-reference",
     ["Service/9-reference: metadata.name: a Service name must be a DNS-1035 label (at most 63 "
      "characters, starting with a letter)"]),
    ("probe-port", "Deployment", "reference-cpu-front", (*CONTAINER, "ports", 0, "name"), "web",
     [f"Deployment/reference-cpu-front: spec.template.spec.containers[0].{probe}.httpGet.port: "
      "no container port named 'http' (ports: ['grpc', 'metrics', 'openai', 'web'])"
      for probe in ("startupProbe", "readinessProbe", "livenessProbe")]
     + ["Service/reference-cpu: spec.ports[0].targetPort: Deployment/reference-cpu-front has no "
        "container port named 'http' (ports: ['grpc', 'metrics', 'openai', 'web'])"]),
]


@pytest.mark.parametrize(("kind", "name", "path", "value", "expected"),
                         [d[1:] for d in DEFECTS], ids=[d[0] for d in DEFECTS])
def test_seeded_defect_is_reported_with_its_path(objects, kind, name, path, value, expected):
    objs = objects(REF)
    _mutate(objs, kind, name, path, value)
    report = validate_objects(objs)
    assert [p.render() for p in report.problems] == expected


def test_missing_configmap_and_service_account_are_named(objects):
    objs = [o for o in objects(REF) if o["kind"] not in ("ConfigMap", "ServiceAccount")]
    problems = [p.render() for p in validate_objects(objs).problems]
    assert problems == [
        line for role in ("front", "prefill", "decode") for line in (
            f"Deployment/reference-cpu-{role}: spec.template.spec.serviceAccountName: no "
            "ServiceAccount 'reference-cpu' here",
            f"Deployment/reference-cpu-{role}: spec.template.spec.volumes.specs: no ConfigMap "
            "'reference-cpu-specs' here")]


def test_unknown_kind_and_non_objects(objects):
    objs = objects(REF) + [{"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}}, {"kind": ""}, ["not", "a", "mapping"]]
    assert [p.render() for p in validate_objects(objs).problems] == [
        "Widget/w: apiVersion: Kubernetes 1.33.0 has no kind Widget in example.com/v1 (and "
        "pdtrt knows no CRD schema for it)",
        "/<no name>: <object>: not a Kubernetes object (apiVersion and kind needed)",
        "<not a mapping>: <object>: not a Kubernetes object (apiVersion and kind needed)"]


def test_without_kubernetes_validate_references_are_still_checked(objects, monkeypatch):
    import pdtrt.deploy.validate as validate

    monkeypatch.setattr(validate, "schema_available", lambda: False)
    objs = objects(REF)
    _mutate(objs, "Service", "reference-cpu-prefill", ("spec", "ports", 0, "port"), "8001")
    _mutate(objs, "HorizontalPodAutoscaler", "reference-cpu-decode",
            ("spec", "scaleTargetRef", "kind"), "StatefulSet")
    report = validate.validate_objects(objs)
    assert not report.schema_checked
    assert [p.render() for p in report.problems] == [
        "HorizontalPodAutoscaler/reference-cpu-decode: spec.scaleTargetRef: no "
        "StatefulSet/reference-cpu-decode here (workloads: Deployment/reference-cpu-decode, "
        "Deployment/reference-cpu-front, Deployment/reference-cpu-prefill)"]
