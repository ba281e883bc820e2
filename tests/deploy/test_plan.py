"""Names, role specs and the deploy plan: what each pod role runs, on which image and nodes,
and every input the plan refuses, with its message."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pdtrt.deploy import plan as plan_module
from pdtrt.deploy.names import PodRole, names_for
from pdtrt.deploy.network import PodNetwork
from pdtrt.deploy.plan import (
    LAUNCHERS,
    DeployOptions,
    Launcher,
    gpu_product_labels,
    plan_deploy,
)
from pdtrt.deploy.roles import role_issues, role_spec
from pdtrt.enums import Phase, Target
from pdtrt.errors import DeployError
from pdtrt.repo.plan import RepoMode, plan_repo
from pdtrt.targets.registry import target_support

LLAMA, REF = "llama3-8b-h100-l40s-trtllm-0.21", "reference-cpu"


def _with(dep, **sections):
    """``dep`` with spec sections replaced (``kv_transfer={"transports": ("sm",)}``)."""
    spec = dep.spec.model_copy(update={
        key: getattr(dep.spec, key).model_copy(update=value) for key, value in sections.items()})
    return dataclasses.replace(dep, spec=spec)


@pytest.mark.parametrize(("spec_name", "override", "base"), [
    ("llama3-8b-h100-l40s", None, "llama3-8b-h100-l40s"),
    ("my_model.v2", None, "my-model-v2"),
    ("3b", "pd-3b", "pd-3b"),
], ids=["as-is", "sanitised", "override"])
def test_base_names(spec_name, override, base):
    names = names_for(spec_name, override)
    assert names.base == base
    assert names.service(PodRole.FRONT) == base
    assert names.workload(PodRole.DECODE) == f"{base}-decode"


@pytest.mark.parametrize(("spec_name", "override", "message"), [
    ("3b-chat", None, "the spec's name '3b-chat' gives the Kubernetes base name '3b-chat', which "
     "is not a DNS-1035 label (lowercase letters, digits and '-', starting with a letter, ending "
     "with a letter or digit)"),
    ("x" * 56, None, f"the spec's name '{'x' * 56}' gives the base name '{'x' * 56}' (56 "
     f"characters); its longest object name adds 8 ({'x' * 56}-prefill) and Kubernetes allows "
     "63: 56 + 8 > 63"),
    ("ok", "Bad_Name", "--name gives the Kubernetes base name 'Bad_Name', which is not a DNS-1035 "
     "label (lowercase letters, digits and '-', starting with a letter, ending with a letter or "
     "digit)"),
], ids=["digit-first", "too-long", "bad-override"])
def test_names_kubernetes_refuses(spec_name, override, message):
    with pytest.raises(DeployError) as err:
        names_for(spec_name, override)
    assert err.value.message == message


def test_every_target_has_a_launcher():
    assert set(LAUNCHERS) == set(Target)


@pytest.mark.parametrize("role", list(PodRole))
def test_role_specs(deps, role):
    dep = deps[LLAMA]
    rs = role_spec(dep.spec, role, names_for(dep.spec.name)).spec
    assert (rs.serving.host, rs.serving.http_port, rs.serving.grpc_port,
            rs.serving.metrics_port) == ("0.0.0.0", 8000, 8001, 8002)
    base = "llama3-8b-h100-l40s-trtllm-0-21"  # the k8s name: no dots
    want = ({p: (f"{base}-{p}:8001",) for p in Phase} if role is PodRole.FRONT
            else {role.phase: (f"{base}-{role.phase}:8001",)})
    assert rs.endpoints == want
    if role.phase is not None:
        assert rs.pool(role.phase).instances == 1
    assert rs.model_dump(exclude={"prefill", "decode", "serving"}) == dep.spec.model_dump(
        exclude={"prefill", "decode", "serving"})
    assert rs.decode.engine == dep.spec.decode.engine


def test_role_spec_points_model_path_at_the_checkpoint_on_the_volume(deps):
    dep = deps[LLAMA]
    spec = dep.spec.model_copy(update={"model": dep.spec.model.model_copy(
        update={"path": "/home/me/llama"})})
    for role in PodRole:
        assert role_spec(spec, role, names_for(spec.name)).spec.model.path == "/models/checkpoint"


@pytest.mark.parametrize(("role", "mode", "models"), [
    (PodRole.FRONT, RepoMode.DISAGGREGATED, ["preprocessing", "router", "postprocessing",
                                             "health", "ensemble"]),
    (PodRole.PREFILL, RepoMode.POOLS, ["prefill", "health"]),
    (PodRole.DECODE, RepoMode.POOLS, ["decode", "health"]),
], ids=["front", "prefill", "decode"])
def test_each_reference_pod_generates_the_repository_of_its_role(deps, tmp_path, role, mode,
                                                                  models):
    """What the init container's `pdtrt repo` will write, planned here from the role's spec."""
    dep = deps[REF]
    plan = plan_deploy(dep, DeployOptions())
    rp = plan.role(role)
    assert rp.repo_mode == mode
    repo = plan_repo(dataclasses.replace(dep, spec=rp.spec.spec), mode=mode,
                     engines_root=tmp_path)
    names = [str(x.name) for x in repo.models] + [str(e.name) for e in repo.ensembles]
    assert names == models
    assert role_issues([r.spec for r in plan.roles]) == []


def test_trtllm_pods_are_told_the_target_refuses_remote_pools(deps):
    plan = plan_deploy(deps[LLAMA], DeployOptions())
    assert not target_support(Target.TRTLLM_0_21).supports_remote_pools
    assert plan.warnings[3] == (
        "the pods' specs break pdtrt's spec rules -- front (prefill.endpoint, decode.endpoint); "
        "prefill (prefill.endpoint); decode (decode.endpoint) -- so `pdtrt repo` in those pods' "
        "init containers will refuse them: pools in other Triton servers are supported on the "
        "reference and trtllm-1.2 targets only, not on trtllm-0.21; remove the endpoint and serve "
        "both pools from this repository")


def test_trtllm_plan(deps):
    plan = plan_deploy(deps[LLAMA], DeployOptions())
    front, prefill, decode = plan.roles
    assert (front.image, front.launcher, front.replicas, front.max_replicas) == (
        plan_module.default_pdtrt_image(), Launcher.PDTRT_SERVE, 1, None)
    ngc = "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"
    assert (prefill.image, prefill.init_image, prefill.launcher) == (
        ngc, plan_module.default_pdtrt_image(), Launcher.LAUNCH_SCRIPT)
    assert (prefill.replicas, prefill.max_replicas, decode.replicas, decode.max_replicas) == (
        1, 2, 2, 4)
    assert prefill.gpu_products == ("NVIDIA-H100-80GB-HBM3",)
    assert decode.gpu_products == ("NVIDIA-L40S",)
    assert prefill.resources.to_k8s() == {
        "requests": {"cpu": "4", "memory": "25Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "25Gi", "nvidia.com/gpu": "1"}}
    assert prefill.resources.why == ("1 GPU(s): weights 14.96 GiB + base 8 GiB + /dev/shm 2 GiB "
                                     "= 25Gi; 4 cores")
    assert plan.warnings[0] == (
        "kv_transfer.transports asks for rc (InfiniBand/RoCE), but the pool pods get no RDMA "
        "device (--network pod, no --rdma-resource): UCX will use tcp between pods")


def test_reference_plan_uses_the_pdtrt_image_everywhere(deps):
    plan = plan_deploy(deps[REF], DeployOptions(pdtrt_image="registry.local/pdtrt:dev"))
    assert {r.image for r in plan.roles} == {"registry.local/pdtrt:dev"}
    assert {r.launcher for r in plan.roles} == {Launcher.PDTRT_SERVE}
    assert all(r.gpu_products == () and not r.uses_gpu for r in plan.roles)
    assert plan.warnings == ()


def test_gpu_product_labels_follow_feature_discovery():
    assert gpu_product_labels(("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")) == (
        "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB")


def test_rdma_option(deps):
    plan = plan_deploy(deps[LLAMA], DeployOptions(rdma_resource="rdma/hca"))
    assert not any("UCX will use tcp" in w for w in plan.warnings)  # no transport warning
    assert plan.warnings[-1].startswith("the pods' specs")
    pool = plan.role(PodRole.DECODE)
    assert pool.rdma and ("rdma/hca", 1) in pool.resources.extra
    assert not plan.role(PodRole.FRONT).rdma


def test_rdma_resource_without_rdma_transport_warns(deps):
    plan = plan_deploy(deps[REF], DeployOptions(rdma_resource="rdma/hca",
                                                network=PodNetwork.HOST))
    assert plan.warnings == (
        "--rdma-resource rdma/hca gives the pool pods an RDMA device, but "
        "kv_transfer.transports [sm, tcp] has no RDMA transport (rc, dc, ud): UCX will not use "
        "it",)


@pytest.mark.parametrize(("example", "change", "options", "message"), [
    (REF, {"kv_transfer": {"transports": ("sm",)}}, {},
     "kv_transfer.transports [sm] gives the pool pods no way to move the KV cache between pods: "
     "none of them crosses hosts"),
    (LLAMA, {"kv_transfer": {"transports": ("rc", "cuda_copy")}}, {},
     "kv_transfer.transports [rc, cuda_copy] gives the pool pods no way to move the KV cache "
     "between pods: its RDMA transports (rc) need an RDMA device (--rdma-resource)"),
    (REF, {"router": {"aggregated_below_tokens": 64}}, {},
     "router.aggregated_below_tokens is 64: the front would need an aggregated engine (and its "
     "GPU) of its own, which pdtrt deploy k8s does not generate"),
    (LLAMA, {}, {"max_replicas": {Phase.DECODE: 1}},
     "--max-replicas decode=1 is below the decode pool's instances (2), the autoscaler's "
     "minimum"),
], ids=["no-cross-host-transport", "rdma-without-device", "aggregated-front", "max-below-min"])
def test_plan_refuses(deps, example, change, options, message):
    with pytest.raises(DeployError) as err:
        plan_deploy(_with(deps[example], **change), DeployOptions(**options))
    assert err.value.message == message


def test_gpu_target_without_an_image(deps, monkeypatch):
    monkeypatch.setattr(plan_module, "target_image", lambda _target: None)
    with pytest.raises(DeployError) as err:
        plan_deploy(deps[LLAMA], DeployOptions())
    assert err.value.message == ("target trtllm-0.21 names no container image to serve its "
                                 "engines in")
    assert err.value.hint.startswith("pass --engine-image IMAGE")
    plan = plan_deploy(deps[LLAMA], DeployOptions(engine_image="mirror/triton:25.08"))
    assert plan.role(PodRole.PREFILL).image == "mirror/triton:25.08"


def test_the_front_asks_for_the_router_cores_the_decode_pool_can_keep_busy(deps):
    from pdtrt.deploy.resources import (
        FRONT_CPU_S_PER_TOKEN,
        ROUTER_CPU_S_PER_TOKEN,
        decode_tok_per_s,
    )

    llama = deps[LLAMA]
    per_pod = decode_tok_per_s(llama)
    assert 1000 < per_pod < 4000  # an L40S decoding Llama-3.1-8B at its full batch
    fronts = {n: plan_deploy(llama, DeployOptions(max_replicas={Phase.DECODE: n})).roles[0]
              for n in (2, 4, 8)}
    for n, front in fronts.items():
        assert front.role is PodRole.FRONT
        tok_s = n * per_pod  # router CPU per token, + the OpenAI front's (one core at most)
        assert front.resources.cpus == max(2, math.ceil(
            1 + tok_s * ROUTER_CPU_S_PER_TOKEN + min(1, tok_s * FRONT_CPU_S_PER_TOKEN)))
    assert fronts[2].resources.cpus < fronts[8].resources.cpus  # more decode pods, more router
    assert plan_deploy(deps[REF], DeployOptions()).roles[0].resources.cpus == 2  # CPU target
