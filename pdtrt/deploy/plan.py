"""What each pod role of a deployment runs, on which image and nodes, how many of them.

:func:`plan_deploy` turns a deployment and the ``pdtrt deploy k8s`` options into typed
:class:`RolePlan` objects (one per pod role) -- everything the Kubernetes objects are then built
from. The rules, in one place:

- **Images.** Pods that run pdtrt's embedded Triton (the front on every target, the pools of
  the reference target) use the *pdtrt image*: a Python image with ``pdtrt[reference,server]``
  installed (default ``pdtrt:<version>``; it must be built, docs/deploy.md). Pools of a GPU
  target use the target's container (``TargetSupport.container_image``, e.g. NGC
  ``tritonserver:25.08-trtllm-python-py3``); their init container, which runs
  ``pdtrt repo``, uses the pdtrt image.
- **How a pool starts** depends on the target (:data:`LAUNCHERS`): ``pdtrt serve`` of the
  generated repository, or the repository's own ``launch.sh`` (trtllm-0.21: one MPI world per
  pod, orchestrator and the pod's engine ranks).
- **Replicas.** One pod is one instance of a pool: the spec's ``instances`` are the minimum,
  the autoscaler may go up to ``--max-replicas`` (default twice that). The front has one.
- **Placement.** Pool pods require a node whose ``nvidia.com/gpu.product`` label (set by the
  GPU operator's feature discovery: the NVML name with spaces as dashes) is the pool's GPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.deploy.layout import GRPC_PORT
from pdtrt.deploy.names import Names, PodRole, names_for
from pdtrt.deploy.network import PodNetwork, transport_problems
from pdtrt.deploy.resources import (
    FRONT_CPU_S_PER_TOKEN,
    ROUTER_CPU_S_PER_TOKEN,
    PodResources,
    front_resources,
    front_tok_per_s,
    pool_resources,
)
from pdtrt.deploy.roles import RoleSpec, role_issues, role_spec
from pdtrt.enums import Phase, Target
from pdtrt.errors import DeployError
from pdtrt.targets.registry import target_support
from pdtrt.version import __version__

__all__ = ["LAUNCHERS", "DeployOptions", "DeployPlan", "Launcher", "RolePlan",
           "default_pdtrt_image", "gpu_product_labels", "plan_deploy", "target_image"]

# Seconds a pod may take to start (repository generation + model load) before liveness counts.
STARTUP_BUDGET_S = {True: 900, False: 300}  # GPU pod (engines load), CPU pod


class Launcher(StrEnum):
    PDTRT_SERVE = "pdtrt-serve"  # pdtrt serve REPO (embedded Triton)
    LAUNCH_SCRIPT = "launch-script"  # REPO/launch.sh --in-container (the target's container)


# How each target's pool pods start; a target missing here cannot be deployed (test_plan).
LAUNCHERS: Mapping[Target, Launcher] = {
    Target.REFERENCE: Launcher.PDTRT_SERVE,
    Target.TRTLLM_0_21: Launcher.LAUNCH_SCRIPT,
    Target.TRTLLM_1_2: Launcher.LAUNCH_SCRIPT,  # one Triton server per pod, no MPI world
}


@dataclass(frozen=True, kw_only=True)
class DeployOptions:
    """The ``pdtrt deploy k8s`` options (see its ``--help``); defaults are the documented ones."""

    name: str | None = None
    namespace: str | None = None
    pdtrt_image: str | None = None
    engine_image: str | None = None
    models_claim: str | None = None
    network: PodNetwork = PodNetwork.POD
    rdma_resource: str | None = None
    network_attachment: str | None = None
    max_replicas: Mapping[Phase, int] = field(default_factory=dict)
    monitor_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RolePlan:
    role: PodRole
    spec: RoleSpec
    image: str
    init_image: str  # runs `pdtrt repo` into the pod's scratch directory
    launcher: Launcher
    repo_mode: str  # `pdtrt repo --mode`
    replicas: int  # the front's count; a pool's minimum (its autoscaler's minReplicas)
    max_replicas: int | None  # a pool's autoscaler maxReplicas; None: no autoscaler
    gpu_products: tuple[str, ...]  # node label values to require; empty: any node
    resources: PodResources
    startup_budget_s: int
    rdma: bool  # the pod gets an RDMA device (and IPC_LOCK, as root)

    @property
    def uses_gpu(self) -> bool:
        return self.resources.gpus > 0


@dataclass(frozen=True, kw_only=True)
class DeployPlan:
    dep: Deployment
    names: Names
    options: DeployOptions
    roles: tuple[RolePlan, ...]  # front, prefill, decode
    warnings: tuple[str, ...]

    @property
    def models_claim(self) -> str:
        return self.options.models_claim or f"{self.names.base}-models"

    def role(self, role: PodRole) -> RolePlan:
        return next(r for r in self.roles if r.role is role)

    def meta(self, name: str, role: PodRole | None = None, *,
             extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """An object's ``metadata``: its name, the deployment's labels (of ``role``), and the
        namespace when one was asked for."""
        meta: dict[str, Any] = {"name": name,
                                "labels": {**self.names.labels(role), **(extra_labels or {})}}
        if self.options.namespace:
            meta["namespace"] = self.options.namespace
        return meta


def default_pdtrt_image() -> str:
    """The image ``docs/deploy.md`` builds: Python + ``pdtrt[reference,server]`` of this
    version."""
    return f"pdtrt:{__version__}"


def target_image(target: Target) -> str | None:
    """The container a target serves its engines in (None: it has none)."""
    return target_support(target).container_image


def gpu_product_labels(nvml_names: tuple[str, ...]) -> tuple[str, ...]:
    """``nvidia.com/gpu.product`` values of a GPU type: GPU feature discovery's rule (the NVML
    name, spaces replaced by dashes; a ``-SHARED`` suffix marks time-sliced GPUs, not wanted)."""
    return tuple(name.replace(" ", "-") for name in nvml_names)


def _engine_image(dep: Deployment, options: DeployOptions, pdtrt_image: str) -> str:
    target = dep.spec.target
    if LAUNCHERS.get(target) is None:
        raise DeployError(f"pdtrt deploy does not know how target {target}'s pools start",
                          hint="add the target to pdtrt.deploy.plan.LAUNCHERS")
    if not target_support(target).needs_gpu:
        return options.engine_image or pdtrt_image
    image = options.engine_image or target_image(target)
    if image is None:
        raise DeployError(f"target {target} names no container image to serve its engines in",
                          hint="pass --engine-image IMAGE (an image with tritonserver and the "
                          "target's backend)")
    return image


def _max_replicas(dep: Deployment, options: DeployOptions, phase: Phase) -> int:
    instances = dep.spec.pool(phase).instances
    asked = options.max_replicas.get(phase, 2 * instances)
    if asked < instances:
        raise DeployError(f"--max-replicas {phase}={asked} is below the {phase} pool's "
                          f"instances ({instances}), the autoscaler's minimum",
                          hint=f"pass --max-replicas {phase}={instances} or more")
    return asked


def _pool_plan(dep: Deployment, options: DeployOptions, names: Names, phase: Phase, *,
               image: str, init_image: str) -> RolePlan:
    role = PodRole.of(phase)
    gpu = dep.gpus[phase]
    rdma = options.rdma_resource is not None
    extra = ((options.rdma_resource, 1),) if options.rdma_resource else ()
    res = pool_resources(dep, phase, extra=extra)
    return RolePlan(
        role=role, spec=role_spec(dep.spec, role, names), image=image, init_image=init_image,
        launcher=LAUNCHERS[dep.spec.target], repo_mode="pools",
        replicas=dep.spec.pool(phase).instances,
        max_replicas=_max_replicas(dep, options, phase),
        gpu_products=gpu_product_labels(gpu.nvml_names) if res.gpus else (),
        resources=res, startup_budget_s=STARTUP_BUDGET_S[res.gpus > 0], rdma=rdma)


def plan_deploy(dep: Deployment, options: DeployOptions) -> DeployPlan:
    """The :class:`DeployPlan` of ``dep``; raises :class:`DeployError` for what cannot be
    deployed as asked (names, images, routing, transports, replica bounds)."""
    spec = dep.spec
    names = names_for(spec.name, options.name)
    if spec.router.aggregated_below_tokens > 0:
        raise DeployError(
            f"router.aggregated_below_tokens is {spec.router.aggregated_below_tokens}: the "
            "front would need an aggregated engine (and its GPU) of its own, which pdtrt "
            "deploy k8s does not generate", hint="set router.aggregated_below_tokens to 0")
    error, warnings = transport_problems(spec, network=options.network,
                                         rdma_resource=options.rdma_resource)
    if error is not None:
        raise DeployError(error, hint="add tcp to kv_transfer.transports (or rc with "
                          "--rdma-resource on an RDMA fabric)")
    pdtrt_image = options.pdtrt_image or default_pdtrt_image()
    engine_image = _engine_image(dep, options, pdtrt_image)
    pools = [_pool_plan(dep, options, names, p, image=engine_image, init_image=pdtrt_image)
             for p in Phase]
    decode_max = next(p.max_replicas or p.replicas for p in pools
                      if p.role is PodRole.of(Phase.DECODE))
    gpu = target_support(spec.target).needs_gpu
    # the perf estimate behind it runs once, for the resources and the warnings alike
    tok_s = front_tok_per_s(dep, max_decode_replicas=decode_max) if gpu else 0.0
    front_res = front_resources(dep, tok_per_s=tok_s, max_decode_replicas=decode_max)
    if gpu:
        router_cores = math.ceil(tok_s * ROUTER_CPU_S_PER_TOKEN)
        if router_cores > spec.router.instances:
            warnings.append(
                f"the router relays up to ~{router_cores} cores' worth of tokens at "
                f"{decode_max} decode pods ({front_res.why}), but router.instances is "
                f"{spec.router.instances}: one router instance uses one core; set "
                f"router.instances: {router_cores} (docs/serve.md, Sizing the router)")
        if tok_s * FRONT_CPU_S_PER_TOKEN > 1:
            warnings.append(
                f"the OpenAI front is one process (one core: ~{1 / FRONT_CPU_S_PER_TOKEN:,.0f} "
                f"streamed tok/s at {FRONT_CPU_S_PER_TOKEN * 1e6:.0f} us/token), and "
                f"{decode_max} decode pods make up to ~{tok_s:,.0f} tok/s: with every client "
                f"on /v1 it is the bottleneck; send the heavy clients to gRPC (port "
                f"{GRPC_PORT}) (docs/openai.md)")
    front = RolePlan(
        role=PodRole.FRONT, spec=role_spec(spec, PodRole.FRONT, names), image=pdtrt_image,
        init_image=pdtrt_image, launcher=Launcher.PDTRT_SERVE, repo_mode="disaggregated",
        replicas=1, max_replicas=None, gpu_products=(), resources=front_res,
        startup_budget_s=STARTUP_BUDGET_S[False], rdma=False)
    roles = (front, *pools)
    warnings += role_issues([r.spec for r in roles])
    return DeployPlan(dep=dep, names=names, options=options, roles=roles,
                      warnings=tuple(warnings))
