"""The workload objects of a deployment: ServiceAccount, spec ConfigMap, and per pod role a
Deployment, a Service and a PodDisruptionBudget -- plain dicts in the Kubernetes API's shape.

Each pod: an init container (pdtrt image) generates the role's Triton repository from its spec
into the pod's scratch directory (``pdtrt repo``, engines read from the models volume), then the
main container serves it (:class:`~pdtrt.deploy.plan.Launcher`). Pods run as a non-root user
with a read-only root filesystem, no privilege escalation, all capabilities dropped and the
runtime's default seccomp profile (the "restricted" Pod Security Standard) -- except pool pods
given an RDMA device, which run as root with ``IPC_LOCK`` added (:mod:`pdtrt.deploy.network`).

Deployments, not StatefulSets: a pool pod is interchangeable with its siblings (no ordinal
identity -- the KV transfer carries the prefill pod's address with every request). Pools
managed by an autoscaler leave ``replicas`` out, so re-applying the manifests does not undo
its scaling; their rolling update surges one pod before taking one away (``maxSurge: 1``,
``maxUnavailable: 0``: capacity never drops, at the price of one spare GPU during a roll-out).
"""

from __future__ import annotations

import hashlib

from pdtrt import envvars
from pdtrt.deploy.layout import (
    ENGINES_DIR,
    GRPC_PORT,
    MODELS_DIR,
    OPENAI_PORT,
    OPENAI_PORT_NAME,
    PORTS,
    REPO_DIR,
    RUN_DIR,
    SERVE_DIR,
    SPEC_DIR,
    TMP_DIR,
)
from pdtrt.deploy.names import Names, PodRole
from pdtrt.deploy.network import NETWORKS_ANNOTATION, PodNetwork, ucx_env
from pdtrt.deploy.plan import DeployPlan, Launcher, RolePlan
from pdtrt.deploy.probes import probes
from pdtrt.deploy.problems import Obj

__all__ = ["deployment", "pdb", "service", "service_account", "specs_configmap"]

NON_ROOT_UID = 1000  # the pdtrt image's user; NGC Triton images have uid 1000 (triton-server)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_TAINT = "nvidia.com/gpu"  # GPU node pools are commonly tainted so only GPU pods land there
SPEC_HASH_ANNOTATION = "pdtrt/spec-sha256"
# Seconds between a pod leaving the Service's endpoints and Triton stopping: streams in flight
# end, and kube-proxy stops sending new connections first (pods without pdtrt engine models).
PRE_STOP_SLEEP_S = 10
# The most seconds a pool pod's preStop waits for `pdtrt drain` (its engine models take no new
# requests, the routers choose them no more, those in flight finish: docs/drain.md); below
# TERMINATION_GRACE_S, which also has to cover Triton's own stop after it.
PRE_STOP_DRAIN_S = 60
TERMINATION_GRACE_S = 90
HOME = str(TMP_DIR)  # the root filesystem is read-only: caches go to the writable /tmp
API_KEY_SECRET_KEY = "api-key"


def service_account(plan: DeployPlan) -> Obj:
    """The pods' identity: no Kubernetes API access, so no token is mounted."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": plan.meta(plan.names.base), "automountServiceAccountToken": False}


def specs_configmap(plan: DeployPlan) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": plan.meta(plan.names.specs_configmap),
            "data": {r.spec.filename: r.spec.text for r in plan.roles}}


def _init_container(plan: DeployPlan, rp: RolePlan) -> Obj:
    args = ["repo", str(SPEC_DIR / rp.spec.filename), "-o", str(REPO_DIR), "--mode",
            rp.repo_mode, "--engines-dir", str(ENGINES_DIR), "--force"]
    return {"name": "repo", "image": rp.init_image, "command": ["pdtrt"], "args": args,
            "env": [{"name": "HOME", "value": HOME}], "volumeMounts": _mounts(),
            "securityContext": _container_security(rdma=False),
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                          "limits": {"memory": "1Gi"}}}


def _serve_command(rp: RolePlan) -> tuple[list[str], list[str]]:
    if rp.launcher is Launcher.LAUNCH_SCRIPT:
        return [str(REPO_DIR / "launch.sh")], ["--in-container"]
    args = ["serve", str(REPO_DIR), "--workdir", str(SERVE_DIR), "--host", "0.0.0.0",
            "--timeout", str(rp.startup_budget_s)]
    for name, port in PORTS.items():
        args += [f"--{name}-port", str(port)]
    if rp.role is PodRole.FRONT:  # the OpenAI front, in the serve process (docs/openai.md)
        args += ["--openai-port", str(OPENAI_PORT)]
    return ["pdtrt"], args


def _mounts() -> list[Obj]:
    return [{"name": "specs", "mountPath": str(SPEC_DIR), "readOnly": True},
            {"name": "models", "mountPath": str(MODELS_DIR), "readOnly": True},
            {"name": "run", "mountPath": str(RUN_DIR)},
            {"name": "tmp", "mountPath": str(TMP_DIR)},
            {"name": "shm", "mountPath": "/dev/shm"}]


def _container_security(*, rdma: bool) -> Obj:
    caps: Obj = {"drop": ["ALL"]}
    if rdma:  # pinning memory for RDMA registration; effective for root processes only
        caps["add"] = ["IPC_LOCK"]
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": caps}


def _pod_security(*, rdma: bool) -> Obj:
    user = ({"runAsNonRoot": False, "runAsUser": 0} if rdma else
            {"runAsNonRoot": True, "runAsUser": NON_ROOT_UID, "runAsGroup": NON_ROOT_UID})
    return {**user, "fsGroup": NON_ROOT_UID, "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"}}


def _main_container(plan: DeployPlan, rp: RolePlan) -> Obj:
    command, args = _serve_command(rp)
    host = plan.options.network is PodNetwork.HOST and rp.role is not PodRole.FRONT
    ports = [{"name": n, "containerPort": p, "protocol": "TCP", **({"hostPort": p} if host else {})}
             for n, p in _ports(rp.role).items()]
    env = [{"name": "HOME", "value": HOME}]
    env += [{"name": k, "value": v} for k, v in ucx_env(plan.dep.spec, rp.role.phase)]
    env += _hub_env(plan)
    env += _tracing_env(plan)
    if rp.role is PodRole.FRONT:
        env += _api_key_env(plan)
    return {"name": "triton", "image": rp.image, "command": command, "args": args, "env": env,
            "ports": ports, **probes(startup_budget_s=rp.startup_budget_s),
            "lifecycle": {"preStop": {"exec": {"command": _pre_stop(rp)}}},
            "resources": rp.resources.to_k8s(), "volumeMounts": _mounts(),
            "securityContext": _container_security(rdma=rp.rdma)}


def _pre_stop(rp: RolePlan) -> list[str]:
    """A pool pod served by ``pdtrt serve`` drains its engine models before it stops, so that
    scaling a pool down loses no request in flight; other pods wait for the Service to forget
    them."""
    if rp.launcher is Launcher.LAUNCH_SCRIPT or rp.role is PodRole.FRONT:
        return ["sleep", str(PRE_STOP_SLEEP_S)]
    return ["pdtrt", "drain", "--url", f"127.0.0.1:{GRPC_PORT}", "--repository", str(REPO_DIR),
            "--timeout", str(PRE_STOP_DRAIN_S)]


def _ports(role: PodRole) -> dict[str, int]:
    """Container port name -> number: Triton's, and on the front the OpenAI front's."""
    return {**PORTS, OPENAI_PORT_NAME: OPENAI_PORT} if role is PodRole.FRONT else dict(PORTS)


def _api_key_env(plan: DeployPlan) -> list[Obj]:
    """The OpenAI front's API key (``PDTRT_API_KEY``, read by ``pdtrt serve``) from the Secret
    ``<name>-openai-api-key`` (key ``api-key``) when it exists; without it the front is open."""
    secret = {"name": plan.names.api_key_secret, "key": API_KEY_SECRET_KEY, "optional": True}
    return [{"name": envvars.PDTRT_API_KEY, "valueFrom": {"secretKeyRef": secret}}]


def _tracing_env(plan: DeployPlan) -> list[Obj]:
    """The collector's address and the sampling when the spec's ``serving.tracing`` names an
    endpoint (:mod:`pdtrt.tracing_settings`): every pod's front, router and engines export
    their spans there (docs/tracing.md); edit ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` to point
    them elsewhere."""
    settings = plan.dep.spec.serving.tracing.settings()
    if settings is None:
        return []
    return [{"name": k, "value": v} for k, v in settings.to_env().items()]


def _hub_env(plan: DeployPlan) -> list[Obj]:
    """For a model given by its Hub name: the Hugging Face cache in the pod's scratch volume
    (the root filesystem is read-only) and ``HF_TOKEN`` from the Secret
    ``<name>-hf-token`` (key ``token``) when it exists -- gated models need it."""
    if plan.dep.spec.model.path is not None:
        return []
    secret = {"name": f"{plan.names.base}-hf-token", "key": "token", "optional": True}
    return [{"name": envvars.HF_HOME, "value": str(RUN_DIR / "huggingface")},
            {"name": envvars.HF_TOKEN, "valueFrom": {"secretKeyRef": secret}}]


def _node_placement(rp: RolePlan) -> Obj:
    if not rp.gpu_products:
        return {}
    term = {"matchExpressions": [{"key": GPU_PRODUCT_LABEL, "operator": "In",
                                  "values": list(rp.gpu_products)}]}
    return {"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
            "tolerations": [{"key": GPU_TAINT, "operator": "Exists",
                             "effect": "NoSchedule"}]}



def _volumes(plan: DeployPlan, rp: RolePlan) -> list[Obj]:
    return [{"name": "specs", "configMap": {"name": plan.names.specs_configmap}},
            {"name": "models", "persistentVolumeClaim": {"claimName": plan.models_claim,
                                                          "readOnly": True}},
            {"name": "run", "emptyDir": {}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "shm", "emptyDir": {"medium": "Memory",
                                         "sizeLimit": rp.resources.shm_limit}}]


def _pod_template(plan: DeployPlan, rp: RolePlan) -> Obj:
    names: Names = plan.names
    annotations = {SPEC_HASH_ANNOTATION: hashlib.sha256(rp.spec.text.encode()).hexdigest()}
    pool = rp.role is not PodRole.FRONT
    if pool and plan.options.network_attachment:
        annotations[NETWORKS_ANNOTATION] = plan.options.network_attachment
    spec: Obj = {
        "serviceAccountName": names.base, "automountServiceAccountToken": False,
        "securityContext": _pod_security(rdma=rp.rdma),
        "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
        "initContainers": [_init_container(plan, rp)],
        "containers": [_main_container(plan, rp)],
        "volumes": _volumes(plan, rp),
        **_node_placement(rp),
    }
    if pool and plan.options.network is PodNetwork.HOST:
        spec.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    return {"metadata": {"labels": names.labels(rp.role), "annotations": annotations},
            "spec": spec}


def deployment(plan: DeployPlan, rp: RolePlan) -> Obj:
    spec: Obj = {"selector": {"matchLabels": plan.names.selector(rp.role)},
                 "template": _pod_template(plan, rp)}
    if rp.max_replicas is None:
        spec["replicas"] = rp.replicas
    if rp.uses_gpu:
        spec["strategy"] = {"type": "RollingUpdate",
                            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": plan.meta(plan.names.workload(rp.role), rp.role), "spec": spec}


def service(plan: DeployPlan, role: PodRole) -> Obj:
    """The front's Service takes clients (HTTP, gRPC and the OpenAI API); a pool's takes the
    router's gRPC. ClusterIP: Kubernetes balances *connections* across ready pods
    (docs/deploy.md)."""
    names = ("http", "grpc", OPENAI_PORT_NAME) if role is PodRole.FRONT else ("grpc",)
    ports = [{"name": n, "port": _ports(role)[n], "targetPort": n, "protocol": "TCP",
              **({"appProtocol": "kubernetes.io/h2c"} if n == "grpc" else {})} for n in names]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": plan.meta(plan.names.service(role), role),
            "spec": {"type": "ClusterIP", "selector": plan.names.selector(role), "ports": ports}}


def pdb(plan: DeployPlan, role: PodRole) -> Obj:
    """At most one pod of a role evicted at a time (node drains, cluster upgrades)."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": plan.meta(plan.names.workload(role), role),
            "spec": {"maxUnavailable": 1,
                     "selector": {"matchLabels": plan.names.selector(role)}}}

