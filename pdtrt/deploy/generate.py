"""``pdtrt deploy k8s``: a deployment's Kubernetes manifests, as a Kustomize base (library
entry point).

Why a Kustomize base and not a Helm chart: ``pdtrt.yaml`` is already the one source of truth,
and a chart would be a second one (values that restate the spec, logic in templates). The base
is plain, validated YAML that ``kubectl apply -k`` takes as it is; what differs per cluster
(namespace, image registry, storage, replicas, extra labels) goes in an overlay, which
kustomize merges without templating.

:func:`generate_k8s` plans (:mod:`pdtrt.deploy.plan`), builds every object, validates them all
(:mod:`pdtrt.deploy.validate`; a problem here is a pdtrt bug or an option Kubernetes refuses,
and nothing is written) and writes the directory atomically (:func:`pdtrt.repo.write.write_tree`)::

    kustomization.yaml          the resources below, in apply order
    base.yaml                   ServiceAccount, ConfigMap <base>-specs (one spec per pod role)
    front.yaml                  Deployment, Service <base>, PodDisruptionBudget
    prefill.yaml, decode.yaml   Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler
    monitoring.yaml             PodMonitor, ConfigMap <base>-grafana-dashboard
    grafana/<base>.json         the dashboard, to import by hand
    prometheus-adapter/values.yaml   rules serving the autoscalers' metrics (Helm values)
    pdtrt-deploy.json           what was generated from what, and how it was checked
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.deploy.autoscale import adapter_values, hpa, pool_metric
from pdtrt.deploy.dashboard import SIDECAR_LABEL, dashboard_configmap, dashboard_text
from pdtrt.deploy.k8s import deployment, pdb, service, service_account, specs_configmap
from pdtrt.deploy.monitoring import openai_podmonitor, podmonitor
from pdtrt.deploy.plan import DeployOptions, DeployPlan, plan_deploy
from pdtrt.deploy.problems import Obj, ref_of
from pdtrt.deploy.render import GENERATED, dump_objects, dump_yaml
from pdtrt.deploy.validate import K8sValidationReport, validate_objects
from pdtrt.errors import DeployError, DeployInvalidError, RepoError
from pdtrt.repo.render import spec_sha256
from pdtrt.repo.write import check_writable, write_tree
from pdtrt.version import __version__

__all__ = ["DEPLOY_MANIFEST_NAME", "DeployResult", "build_files", "generate_k8s"]

DEPLOY_MANIFEST_NAME = "pdtrt-deploy.json"
DEPLOY_MANIFEST_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class DeployResult:
    out: Path
    plan: DeployPlan
    files: tuple[str, ...]
    objects: tuple[str, ...]  # Kind/name, in apply order
    report: K8sValidationReport

    def to_dict(self) -> dict[str, object]:
        return {"out": str(self.out), **_summary(self.plan, self.report),
                "files": list(self.files)}


def _summary(plan: DeployPlan, report: K8sValidationReport) -> dict[str, Any]:
    dep = plan.dep
    roles = {}
    for rp in plan.roles:
        entry: dict[str, Any] = {
            "workload": f"Deployment/{plan.names.workload(rp.role)}", "image": rp.image,
            "init_image": rp.init_image, "launcher": str(rp.launcher),
            "replicas": rp.replicas, "max_replicas": rp.max_replicas,
            "gpu_products": list(rp.gpu_products), "resources": rp.resources.to_k8s(),
            "resources_why": rp.resources.why}
        if rp.role.phase is not None:
            metric = pool_metric(dep, rp.role.phase)
            entry["autoscale"] = {"metric": metric.name, "target": metric.target,
                                  "why": metric.why}
        roles[str(rp.role)] = entry
    return {"deployment": dep.spec.name, "target": str(dep.spec.target),
            "base_name": plan.names.base, "models_claim": plan.models_claim,
            "kubernetes_version": report.kubernetes_version,
            "schema_checked": report.schema_checked, "objects": list(report.objects),
            "roles": roles, "warnings": list(plan.warnings)}


def _groups(plan: DeployPlan) -> dict[str, list[Obj]]:
    """File name -> its objects, in apply order."""
    groups: dict[str, list[Obj]] = {"base.yaml": [service_account(plan), specs_configmap(plan)]}
    for rp in plan.roles:
        objs = [deployment(plan, rp), service(plan, rp.role), pdb(plan, rp.role)]
        if rp.max_replicas is not None:
            objs.append(hpa(plan, rp))
        groups[f"{rp.role}.yaml"] = objs
    target = plan.dep.spec.target
    sidecar = plan.meta(plan.names.dashboard_configmap, extra_labels={SIDECAR_LABEL: "1"})
    groups["monitoring.yaml"] = [podmonitor(plan), openai_podmonitor(plan),
                                 dashboard_configmap(plan.names, target, sidecar)]
    return groups


def build_files(plan: DeployPlan) -> tuple[dict[str, str], list[Obj]]:
    """(relative path -> text, every Kubernetes object in apply order) of ``plan``; the
    manifest file is added by :func:`generate_k8s`, once the objects are validated."""
    groups = _groups(plan)
    kustomization: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                     "kind": "Kustomization", "resources": list(groups)}
    files = {"kustomization.yaml": GENERATED + dump_yaml(kustomization)}
    files.update({name: dump_objects(objs) for name, objs in groups.items()})
    files[f"grafana/{plan.names.base}.json"] = dashboard_text(plan.names,
                                                              plan.dep.spec.target)
    files["prometheus-adapter/values.yaml"] = (
        "# Helm values of prometheus-community/prometheus-adapter: the metrics pdtrt's "
        "autoscalers read.\n" + GENERATED + dump_yaml(adapter_values(plan.dep)))
    return files, [o for objs in groups.values() for o in objs]


def generate_k8s(dep: Deployment, out: Path, *, options: DeployOptions | None = None,
                 force: bool = False) -> DeployResult:
    """Write the manifests of ``dep`` to ``out``; raises :class:`DeployError` (bad options, a
    target without an image, ``out`` exists) or :class:`DeployInvalidError` (an object failed
    validation: nothing is written)."""
    options = options or DeployOptions()
    try:
        check_writable(out, force=force)
    except RepoError as exc:
        raise DeployError(exc.message, hint=exc.hint) from None
    plan = plan_deploy(dep, options)
    files, objects = build_files(plan)
    report = validate_objects(objects)
    if not report.ok:
        raise DeployInvalidError([p.render() for p in report.problems], source=str(out),
                                 hint="an option Kubernetes refuses (the messages name it), or "
                                 "a pdtrt bug: report it with the spec")
    manifest = {"deploy_manifest_version": DEPLOY_MANIFEST_VERSION, "pdtrt_version": __version__,
                "spec_sha256": spec_sha256(dep), **_summary(plan, report)}
    files[DEPLOY_MANIFEST_NAME] = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    write_tree(out, files, force=force)
    return DeployResult(out=out, plan=plan, files=tuple(sorted(files)),
                        objects=tuple(ref_of(o) for o in objects), report=report)

