"""pdtrt deploy k8s end to end (library): golden files of both examples, determinism, the
Kubernetes objects themselves, atomic writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pdtrt.deploy.generate import generate_k8s
from pdtrt.deploy.names import names_for
from pdtrt.deploy.network import PodNetwork
from pdtrt.deploy.plan import DeployOptions
from pdtrt.deploy.render import load_manifests
from pdtrt.deploy.validate import validate_objects
from pdtrt.enums import Phase
from pdtrt.errors import DeployError, DeployInvalidError
from tests.deploy.conftest import EXAMPLE_NAMES, find

FILES = ["base.yaml", "decode.yaml", "front.yaml", "kustomization.yaml", "monitoring.yaml",
         "pdtrt-deploy.json", "prefill.yaml", "prometheus-adapter/values.yaml"]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_golden(deps, tmp_path, golden, example):
    out = tmp_path / example
    result = generate_k8s(deps[example], out)
    tree = _tree(out)
    base = names_for(deps[example].spec.name).base  # the k8s name: no dots
    assert sorted(tree) == sorted([*FILES, f"grafana/{base}.json"])
    assert list(result.files) == sorted(tree)
    for rel, text in tree.items():
        golden(f"deploy/{example}/{rel}", text)


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_generation_is_deterministic_and_the_files_are_the_objects(deps, tmp_path, example):
    first, second = tmp_path / "a", tmp_path / "b"
    result = generate_k8s(deps[example], first)
    generate_k8s(deps[example], second)
    assert _tree(first) == _tree(second)
    objects = load_manifests([first])  # through kustomization.yaml
    assert [f"{o['kind']}/{o['metadata']['name']}" for o in objects] == list(result.objects)
    assert validate_objects(objects).ok
    manifest = json.loads((first / "pdtrt-deploy.json").read_text())
    assert manifest["kubernetes_version"] == "1.33.0" and manifest["schema_checked"] is True
    assert manifest["objects"] == list(result.objects)


def test_trtllm_objects(objects):
    objs = objects("llama3-8b-h100-l40s-trtllm-0.21")
    decode = find(objs, "Deployment", "llama3-8b-h100-l40s-trtllm-0-21-decode")
    pod = decode["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "nvidia.com/gpu.product", "operator": "In",
                                         "values": ["NVIDIA-L40S"]}]
    (triton,) = pod["containers"]
    assert triton["command"] == ["/var/run/pdtrt/repo/launch.sh"]
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"name": "UCX_TLS", "value": "rc,cuda_copy,tcp"} in triton["env"]
    assert triton["readinessProbe"]["httpGet"] == {"path": "/v2/models/health/ready",
                                                   "port": "http"}
    assert triton["securityContext"] == {"allowPrivilegeEscalation": False,
                                         "readOnlyRootFilesystem": True,
                                         "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"]["runAsNonRoot"] is True
    (init,) = pod["initContainers"]
    assert init["args"] == ["repo", "/etc/pdtrt/decode.yaml", "-o", "/var/run/pdtrt/repo",
                            "--mode", "pools", "--engines-dir", "/models/engines", "--force"]
    assert "replicas" not in decode["spec"]  # the autoscaler owns it
    hpa = find(objs, "HorizontalPodAutoscaler", "llama3-8b-h100-l40s-trtllm-0-21-decode")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 4)
    front = find(objs, "Deployment", "llama3-8b-h100-l40s-trtllm-0-21-front")
    assert front["spec"]["replicas"] == 1
    assert "affinity" not in front["spec"]["template"]["spec"]
    assert front["spec"]["template"]["spec"]["containers"][0]["args"][:2] == [
        "serve", "/var/run/pdtrt/repo"]
    specs = find(objs, "ConfigMap", "llama3-8b-h100-l40s-trtllm-0-21-specs")["data"]
    assert sorted(specs) == ["decode.yaml", "front.yaml", "prefill.yaml"]
    assert yaml.safe_load(specs["decode.yaml"])["decode"]["endpoint"] == (
        "llama3-8b-h100-l40s-trtllm-0-21-decode:8001")


def test_options_reach_the_objects(deps, tmp_path):
    options = DeployOptions(name="pd", namespace="llm", models_claim="shared-models",
                            network=PodNetwork.HOST, rdma_resource="rdma/hca",
                            network_attachment="ib-net", monitor_labels={"release": "kps"},
                            max_replicas={Phase.PREFILL: 3})
    result = generate_k8s(deps["llama3-8b-h100-l40s-trtllm-0.21"], tmp_path / "out",
                          options=options)
    objs = load_manifests([tmp_path / "out"])
    assert {o["metadata"].get("namespace") for o in objs} == {"llm"}
    prefill = find(objs, "Deployment", "pd-prefill")["spec"]["template"]
    assert prefill["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ib-net"
    pod = prefill["spec"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert pod["securityContext"]["runAsUser"] == 0
    triton = pod["containers"][0]
    assert triton["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    assert triton["resources"]["limits"]["rdma/hca"] == "1"
    assert {p["hostPort"] for p in triton["ports"]} == {8000, 8001, 8002}
    assert pod["volumes"][1]["persistentVolumeClaim"]["claimName"] == "shared-models"
    front = find(objs, "Deployment", "pd-front")["spec"]["template"]["spec"]
    assert "hostNetwork" not in front and front["securityContext"]["runAsNonRoot"] is True
    assert find(objs, "PodMonitor", "pd")["metadata"]["labels"]["release"] == "kps"
    assert find(objs, "HorizontalPodAutoscaler", "pd-prefill")["spec"]["maxReplicas"] == 3
    assert result.report.ok


def test_existing_output_is_refused_unless_force(deps, tmp_path):
    out = tmp_path / "out"
    generate_k8s(deps["reference-cpu"], out)
    (out / "stale.yaml").write_text("old")
    with pytest.raises(DeployError) as err:
        generate_k8s(deps["reference-cpu"], out)
    assert err.value.message == f"{out} already exists and is not empty"
    generate_k8s(deps["reference-cpu"], out, force=True)
    assert not (out / "stale.yaml").exists()


def test_invalid_objects_are_never_written(deps, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DeployInvalidError) as err:
        generate_k8s(deps["reference-cpu"], out,
                     options=DeployOptions(monitor_labels={"release": "kube prometheus"}))
    assert err.value.problems == [
        f"PodMonitor/{name}: metadata.labels.release: label value 'kube prometheus' is not "
        "valid (at most 63 characters: letters, digits, '-', '_', '.', alphanumeric ends)"
        for name in ("reference-cpu", "reference-cpu-openai")]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_tracing_gives_every_pod_the_collector_address(deps, objects):
    import dataclasses

    from pdtrt.deploy.generate import build_files
    from pdtrt.deploy.plan import plan_deploy

    dep = deps["reference-cpu"]
    url = "http://otel-collector.observability:4318/v1/traces"
    spec = dep.spec.model_copy(update={"serving": dep.spec.serving.model_copy(update={
        "tracing": dep.spec.serving.tracing.model_copy(update={"endpoint": url,
                                                               "sample_ratio": 0.1})})})
    _files, objs = build_files(plan_deploy(dataclasses.replace(dep, spec=spec),
                                           DeployOptions()))
    pods = [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "Deployment"]
    assert len(pods) == 3
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == url
        assert env["OTEL_TRACES_SAMPLER_ARG"] == "0.1"
        assert env["PDTRT_TRACING_SERVICE_PREFIX"] == "pdtrt"
    untraced = [e["name"] for o in objects("reference-cpu") if o["kind"] == "Deployment"
                for e in o["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert not [n for n in untraced if n.startswith("OTEL_")]
