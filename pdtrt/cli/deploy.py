"""``pdtrt deploy k8s``: Kubernetes manifests from a spec; ``pdtrt deploy validate``: check
manifests offline against the Kubernetes API schema."""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.cli.render import emit_json, json_option
from pdtrt.deploy.generate import generate_k8s
from pdtrt.deploy.layout import GRPC_PORT, HTTP_PORT, OPENAI_PORT
from pdtrt.deploy.names import PodRole
from pdtrt.deploy.network import PodNetwork
from pdtrt.deploy.plan import DeployOptions
from pdtrt.deploy.render import load_manifests
from pdtrt.deploy.validate import KUBERNETES_VERSION, validate_objects
from pdtrt.enums import Phase
from pdtrt.errors import DeployInvalidError
from pdtrt.spec.load import load_deployment


@click.group()
def deploy() -> None:
    """Run a deployment on Kubernetes: generate its manifests (`pdtrt deploy k8s SPEC -o DIR`)
    or check manifests (`pdtrt deploy validate DIR`). Walkthrough: docs/deploy.md."""


def _pairs(param: str, values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE", param_hint=param)
        out[key] = val
    return out


def _max_replicas(values: tuple[str, ...]) -> dict[Phase, int]:
    out = {}
    for key, val in _pairs("--max-replicas", values).items():
        if key not in tuple(Phase) or not val.isdigit() or int(val) < 1:
            raise click.BadParameter(f"{key}={val}: want prefill=N or decode=N with N >= 1",
                                     param_hint="--max-replicas")
        out[Phase(key)] = int(val)
    return out


@deploy.command("k8s")
@click.argument("spec_file", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Directory to write the Kustomize base to (atomically).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--name", help="Base name of every object [default: the spec's name, '_' and "
              "'.' as '-']; a DNS label of at most 55 characters.")
@click.option("--namespace", help="Namespace to put the objects in [default: none, kubectl's "
              "current one].")
@click.option("--pdtrt-image", metavar="IMAGE", help="Image with pdtrt[reference,server] "
              "installed, for the front, init containers and reference pools "
              "[default: pdtrt:<version>, built as docs/deploy.md shows].")
@click.option("--engine-image", metavar="IMAGE", help="Image the GPU pools serve their engines "
              "in [default: the target's container, e.g. NGC "
              "tritonserver:25.08-trtllm-python-py3].")
@click.option("--models-claim", metavar="PVC", help="PersistentVolumeClaim holding engines/ "
              "(and checkpoint/), mounted read-only at /models [default: <name>-models].")
@click.option("--network", type=click.Choice([n.value for n in PodNetwork]),
              default=PodNetwork.POD.value, show_default=True,
              help="pod: pool pods on the pod network (UCX over TCP); host: on the node's "
              "network (one pool pod per node; see docs/deploy.md for the trade-offs).")
@click.option("--rdma-resource", metavar="RESOURCE", help="Device-plugin resource that gives "
              "each pool pod an RDMA device (e.g. rdma/rdma_shared_device_a): UCX rc over "
              "InfiniBand/RoCE; those pods then run as root with IPC_LOCK.")
@click.option("--network-attachment", metavar="NAMES", help="Multus networks for the pool pods "
              "(k8s.v1.cni.cncf.io/networks), e.g. an SR-IOV RDMA network.")
@click.option("--max-replicas", multiple=True, metavar="POOL=N", help="Autoscaler maximum of a "
              "pool, e.g. --max-replicas decode=8 [default: twice the pool's instances].")
@click.option("--monitor-label", multiple=True, metavar="KEY=VALUE", help="Label for the "
              "PodMonitor so your Prometheus selects it, e.g. release=kube-prometheus-stack.")
@json_option
def k8s(spec_file: Path, out: Path, force: bool, name: str | None, namespace: str | None,
        pdtrt_image: str | None, engine_image: str | None, models_claim: str | None,
        network: str, rdma_resource: str | None, network_attachment: str | None,
        max_replicas: tuple[str, ...], monitor_label: tuple[str, ...], as_json: bool) -> None:
    """Write SPEC's Kubernetes manifests to DIR, every object checked against the Kubernetes
    API schema offline.

    \b
    One workload per pod role, each generating its Triton repository from its
    role's spec at start and serving it:
      front     ensemble, pre/postprocessing, router (CPU); Service <name>
      prefill   the prefill pool on its GPU type (node label nvidia.com/gpu.product)
      decode    the decode pool on its GPU type
    plus Services, PodDisruptionBudgets, an autoscaler per pool (prefill queue
    time; decode KV usage or sequences in flight), a PodMonitor, a Grafana
    dashboard and the prometheus-adapter rules the autoscalers need.

    \b
    Then:  kubectl apply -k DIR
    """
    options = DeployOptions(
        name=name, namespace=namespace, pdtrt_image=pdtrt_image, engine_image=engine_image,
        models_claim=models_claim, network=PodNetwork(network), rdma_resource=rdma_resource,
        network_attachment=network_attachment, max_replicas=_max_replicas(max_replicas),
        monitor_labels=_pairs("--monitor-label", monitor_label))
    result = generate_k8s(load_deployment(spec_file), out, options=options, force=force)
    if as_json:
        emit_json(result.to_dict())
        return
    plan, report = result.plan, result.report
    for text in plan.warnings:
        click.echo(f"warning: {text}", err=True)
    checked = (f"valid against Kubernetes {report.kubernetes_version}" if report.schema_checked
               else "NOT schema-checked (install kubernetes-validate: pip install 'pdtrt[dev]')")
    click.echo(f"wrote {out}: {len(result.objects)} objects of {plan.dep.spec.name} "
               f"({plan.dep.spec.target}), {checked}")
    width = max([32, *(len(plan.names.workload(rp.role)) for rp in plan.roles)])
    for rp in plan.roles:
        count = (f"{rp.replicas} pod" if rp.max_replicas is None
                 else f"{rp.replicas}-{rp.max_replicas} pods")
        where = (f"{rp.resources.gpus} GPU on {' | '.join(rp.gpu_products)}" if rp.uses_gpu
                 else "CPU")
        click.echo(f"  {rp.role:<8} {plan.names.workload(rp.role):<{width}} {count:<9} "
                   f"{where:<34} {rp.image}")
    front = plan.names.service(PodRole.FRONT)
    click.echo(f"  clients: Service {front} (HTTP {HTTP_PORT}, gRPC {GRPC_PORT}, OpenAI "
               f"{OPENAI_PORT}/v1; optional key: Secret {plan.names.api_key_secret}); models "
               f"volume: PersistentVolumeClaim {plan.models_claim} (yours)")
    click.echo(f"  dashboard: {out / 'grafana' / (plan.names.base + '.json')}; autoscaler "
               f"metrics: {out / 'prometheus-adapter' / 'values.yaml'}")
    click.echo(f"apply: kubectl apply -k {out}")


@deploy.command("validate")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True,
                type=click.Path(path_type=Path, allow_dash=True))
@click.option("--kubernetes-version", default=KUBERNETES_VERSION, show_default=True,
              help="Kubernetes version whose API schema to check against (1.25 or later).")
@json_option
def validate(paths: tuple[Path, ...], kubernetes_version: str, as_json: bool) -> None:
    """Check manifests offline: the Kubernetes API schema (strict), the PodMonitor against its
    CRD, names and labels, and references between the objects (selectors that select no pod,
    ports, autoscaler targets). PATH: a file, '-' (stdin), or a directory (its
    kustomization.yaml resources, else its *.yaml). Exits 2 on any problem.

    \b
    An overlay:  kubectl kustomize overlays/prod | pdtrt deploy validate -
    """
    report = validate_objects(load_manifests(list(paths)), kubernetes_version=kubernetes_version)
    source = " ".join(map(str, paths))
    if not report.ok:
        exc = DeployInvalidError([p.render() for p in report.problems], source=source,
                                 hint="fix the named fields (or regenerate with pdtrt deploy k8s)")
        if as_json:
            emit_json({**report.to_dict(), **exc.to_dict()})
            raise click.exceptions.Exit(2)
        raise exc
    if as_json:
        emit_json(report.to_dict())
        return
    if not report.schema_checked:
        click.echo("warning: kubernetes-validate is not installed: only names and references "
                   "were checked (pip install 'pdtrt[dev]')", err=True)
    click.echo(f"ok: {source}: {len(report.objects)} objects"
               + (f", valid against Kubernetes {report.kubernetes_version}"
                  if report.schema_checked else ""))
