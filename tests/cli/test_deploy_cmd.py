"""pdtrt deploy k8s SPEC -o DIR and pdtrt deploy validate PATH: every option, exact output."""

from __future__ import annotations

import json

import yaml

from pdtrt.version import __version__
from tests.conftest import EXAMPLES

LLAMA = str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
REF = str(EXAMPLES / "reference-cpu.yaml")
NGC = "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"


def test_k8s_writes_the_manifests_of_the_seed_scenario(run, tmp_path):
    out = tmp_path / "k8s"
    result = run("deploy", "k8s", LLAMA, "--output", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"wrote {out}: 16 objects of llama3-8b-h100-l40s-trtllm-0.21 (trtllm-0.21), valid against "
        "Kubernetes 1.33.0",
        # the name column widens to the longest workload name
        f"  front    llama3-8b-h100-l40s-trtllm-0-21-front   1 pod     CPU{' ' * 32}"
        f"pdtrt:{__version__}",
        "  prefill  llama3-8b-h100-l40s-trtllm-0-21-prefill 1-2 pods  1 GPU on "
        f"NVIDIA-H100-80GB-HBM3     {NGC}",
        "  decode   llama3-8b-h100-l40s-trtllm-0-21-decode  2-4 pods  1 GPU on NVIDIA-L40S"
        f"{' ' * 15}{NGC}",
        "  clients: Service llama3-8b-h100-l40s-trtllm-0-21 (HTTP 8000, gRPC 8001, OpenAI 8080/v1; "
        "optional key: Secret llama3-8b-h100-l40s-trtllm-0-21-openai-api-key); models volume: "
        "PersistentVolumeClaim llama3-8b-h100-l40s-trtllm-0-21-models (yours)",
        f"  dashboard: {out}/grafana/llama3-8b-h100-l40s-trtllm-0-21.json; autoscaler metrics: "
        f"{out}/prometheus-adapter/values.yaml",
        f"apply: kubectl apply -k {out}"]
    warnings = result.stderr.splitlines()
    assert len(warnings) == 4 and all(w.startswith("warning: ") for w in warnings)
    assert "UCX will use tcp between pods" in warnings[0]
    assert "set router.instances: 2" in warnings[1]  # 4 decode pods' tokens: ~2 router cores
    assert "the OpenAI front is one process" in warnings[2]  # ~7,900 tok/s > one core's
    assert ("supported on the reference and trtllm-1.2 targets only, not on trtllm-0.21"
            in warnings[3])
    valid = run("deploy", "validate", str(out))
    assert valid.exit_code == 0, valid.output
    assert valid.stdout == f"ok: {out}: 16 objects, valid against Kubernetes 1.33.0\n"


def test_k8s_options_and_json(run, tmp_path):
    out = tmp_path / "k8s"
    result = run("deploy", "k8s", LLAMA, "-o", str(out), "--name", "pd", "--namespace", "llm",
                 "--pdtrt-image", "reg/pdtrt:1", "--engine-image", "reg/triton:25.08",
                 "--models-claim", "models", "--network", "host", "--rdma-resource", "rdma/hca",
                 "--network-attachment", "ib", "--max-replicas", "decode=6",
                 "--monitor-label", "release=kps", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["base_name"], data["models_claim"]) == ("pd", "models")
    assert data["roles"]["decode"]["image"] == "reg/triton:25.08"
    assert data["roles"]["front"]["image"] == data["roles"]["decode"]["init_image"] == "reg/pdtrt:1"
    assert (data["roles"]["decode"]["replicas"], data["roles"]["decode"]["max_replicas"]) == (2, 6)
    assert data["roles"]["decode"]["resources"]["limits"]["rdma/hca"] == "1"
    assert data["roles"]["prefill"]["autoscale"] == {
        "metric": "pdtrt_prefill_queue_seconds_per_request", "target": "250m",
        "why": "0.25 x slo.ttft_ms 1000 ms = 250 ms of prefill queue per request"}
    # no transport warning (rdma is given): the router sizing (6 decode pods), the OpenAI
    # front's one core, and the target's remote-pool rule
    assert len(data["warnings"]) == 3 and "set router.instances: 3" in data["warnings"][0]
    assert "the OpenAI front is one process" in data["warnings"][1]
    assert data["roles"]["front"]["resources"]["requests"]["cpu"] == "5"  # 2.76 + 1 + 1
    monitoring = list(yaml.safe_load_all((out / "monitoring.yaml").read_text()))
    assert monitoring[0]["metadata"] == {"name": "pd", "namespace": "llm", "labels": {
        "app.kubernetes.io/name": "pdtrt", "app.kubernetes.io/instance": "pd",
        "app.kubernetes.io/managed-by": "pdtrt", "app.kubernetes.io/version": __version__,
        "release": "kps"}}


def test_k8s_refuses_existing_dir_unless_force(run, tmp_path):
    out = tmp_path / "k8s"
    assert run("deploy", "k8s", REF, "-o", str(out)).exit_code == 0
    again = run("deploy", "k8s", REF, "-o", str(out))
    assert again.exit_code == 2
    assert again.stderr == (f"error: {out} already exists and is not empty\n"
                            "hint: pass --force to replace it, or choose another -o DIR\n")
    forced = run("deploy", "k8s", REF, "-o", str(out), "--force", "--name", "ref")
    assert forced.exit_code == 0, forced.output
    assert (out / "grafana" / "ref.json").is_file()


def test_k8s_bad_input(run, tmp_path):
    bad = run("deploy", "k8s", REF, "-o", str(tmp_path / "a"), "--max-replicas", "decoder=3")
    assert bad.exit_code == 2
    assert ("Invalid value for --max-replicas: decoder=3: want prefill=N or decode=N with N >= 1"
            in bad.stderr)
    label = run("deploy", "k8s", REF, "-o", str(tmp_path / "b"), "--monitor-label", "release")
    assert label.exit_code == 2 and "'release' is not KEY=VALUE" in label.stderr
    name = run("deploy", "k8s", REF, "-o", str(tmp_path / "c"), "--name", "9lives", "--json")
    assert name.exit_code == 2
    assert json.loads(name.stdout)["error"] == "DeployError"
    below = run("deploy", "k8s", LLAMA, "-o", str(tmp_path / "d"), "--max-replicas", "decode=1")
    assert below.stderr.splitlines()[0] == (
        "error: --max-replicas decode=1 is below the decode pool's instances (2), the "
        "autoscaler's minimum")
    assert not any((tmp_path / d).exists() for d in "abcd")


def test_validate_reports_every_problem(run, tmp_path):
    out = tmp_path / "k8s"
    assert run("deploy", "k8s", REF, "-o", str(out)).exit_code == 0
    docs = list(yaml.safe_load_all((out / "decode.yaml").read_text()))
    docs[1]["spec"]["selector"]["app.kubernetes.io/component"] = "decoder"
    docs[3]["spec"]["scaleTargetRef"]["name"] = "nope"
    (out / "decode.yaml").write_text(yaml.safe_dump_all(docs))
    result = run("deploy", "validate", str(out))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {out}: 2 problem(s)"
    assert lines[1].startswith("  Service/reference-cpu-decode: spec.selector: ")
    assert lines[2] == ("  HorizontalPodAutoscaler/reference-cpu-decode: spec.scaleTargetRef: "
                        "no Deployment/nope here (workloads: Deployment/reference-cpu-decode, "
                        "Deployment/reference-cpu-front, Deployment/reference-cpu-prefill)")
    as_json = run("deploy", "validate", str(out), "--json", "--kubernetes-version", "1.37")
    assert as_json.exit_code == 2
    data = json.loads(as_json.stdout)
    assert data["error"] == "DeployInvalidError" and len(data["problems"]) == 2
    assert data["kubernetes_version"] == "1.37"


def test_validate_stdin_and_missing_path(run, tmp_path):
    out = tmp_path / "k8s"
    assert run("deploy", "k8s", REF, "-o", str(out)).exit_code == 0
    text = "".join((out / f).read_text() for f in ("base.yaml", "front.yaml"))
    result = run("deploy", "validate", "-", "--json", input=text)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["objects"] == [
        "ServiceAccount/reference-cpu", "ConfigMap/reference-cpu-specs",
        "Deployment/reference-cpu-front", "Service/reference-cpu",
        "PodDisruptionBudget/reference-cpu-front"]
    missing = run("deploy", "validate", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and missing.stderr.startswith("error: ")
