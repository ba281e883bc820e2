"""One HorizontalPodAutoscaler per pool, on the metric that says the pool is short, and the
prometheus-adapter rules that serve those metrics through the custom/external metrics APIs.

- **Prefill** is compute-bound: when it is short, requests wait before their prefill starts,
  and that wait is part of TTFT. Signal: the mean prefill queue time per request the router
  measures (``pdtrt_prefill_queue_seconds_total`` / ``pdtrt_router_requests_total`` over 2
  minutes), an *external* metric (it is measured on the front, about the pool) with a ``Value``
  target: a quarter of the TTFT target (``slo.ttft_ms``), else 250 ms. The autoscaler then
  scales by the ratio measured / target (twice the wait, twice the pods).
- **Decode** is bound by memory: a pod is full when its KV cache (or its batch) is. Signal, per
  pod (``Pods`` metric, averaged over the pool): on trtllm-0.21 the KV-cache block usage
  (used / max blocks of TensorRT-LLM's backend), target 0.8; on the reference target, which
  reports no KV usage, the sequences in flight, target 80 % of the decode batch limit.

Both behave slowly on purpose: a GPU pod takes minutes to load its engine, so the autoscaler
adds one pod per 2 minutes and removes one per 5 after 10 minutes of lower load. The rules are
the same for every pdtrt deployment of a target (autoscalers select their deployment by the
``app_kubernetes_io_instance`` label), so one prometheus-adapter serves them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.deploy import metrics as m
from pdtrt.deploy.names import PROM_INSTANCE, Names
from pdtrt.deploy.plan import DeployPlan, RolePlan
from pdtrt.enums import Phase
from pdtrt.targets.registry import target_support

__all__ = ["PoolMetric", "adapter_values", "hpa", "pool_metric"]

QUEUE_SHARE_OF_TTFT = 0.25
DEFAULT_PREFILL_QUEUE_S = 0.25
DECODE_TARGET_SHARE = 0.8
RATE_WINDOW = "2m"


@dataclass(frozen=True, kw_only=True)
class PoolMetric:
    """The metric an autoscaler reads, as the adapter serves it."""

    name: str  # the metric's name in the custom/external metrics API
    external: bool  # External (about the deployment) vs Pods (per pod, averaged)
    target: str  # a Kubernetes quantity: Value (external) / AverageValue (pods)
    sources: frozenset[str]  # the exported Prometheus metrics it is computed from
    rule: dict[str, Any]  # the prometheus-adapter rule that serves it
    why: str


def _milli(value: float) -> str:
    return f"{round(value * 1000)}m"


def _prefill_metric(dep: Deployment) -> PoolMetric:
    ttft_ms = dep.spec.slo.ttft_ms
    target_s = ttft_ms / 1000 * QUEUE_SHARE_OF_TTFT if ttft_ms else DEFAULT_PREFILL_QUEUE_S
    name = "pdtrt_prefill_queue_seconds_per_request"
    query = (f"sum(rate({m.PREFILL_QUEUE_SECONDS}{{<<.LabelMatchers>>}}[{RATE_WINDOW}])) / "
             f"clamp_min(sum(rate({m.ROUTER_REQUESTS}{{<<.LabelMatchers>>}}[{RATE_WINDOW}])), "
             "0.001)")
    rule = {"seriesQuery": f'{m.PREFILL_QUEUE_SECONDS}{{namespace!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
            "name": {"matches": f"^{m.PREFILL_QUEUE_SECONDS}$", "as": name},
            "metricsQuery": query}
    why = (f"{QUEUE_SHARE_OF_TTFT:g} x slo.ttft_ms {ttft_ms:g} ms" if ttft_ms else
           "no slo.ttft_ms: default") + f" = {target_s * 1000:g} ms of prefill queue per request"
    return PoolMetric(name=name, external=True, target=_milli(target_s),
                      sources=frozenset({m.PREFILL_QUEUE_SECONDS, m.ROUTER_REQUESTS}),
                      rule=rule, why=why)


def _pods_rule(series: str, name: str, query: str) -> dict[str, Any]:
    return {"seriesQuery": f'{series}{{namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                        "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{series}$", "as": name}, "metricsQuery": query}


def _decode_metric(dep: Deployment) -> PoolMetric:
    if target_support(dep.spec.target).needs_gpu:  # TensorRT-LLM's backend: KV-cache blocks
        name = "pdtrt_decode_kv_cache_usage_ratio"
        sel = "<<.LabelMatchers>>,kv_cache_block_type"
        query = (f'sum by (<<.GroupBy>>) (<<.Series>>{{{sel}="used"}}) / '
                 f'sum by (<<.GroupBy>>) (<<.Series>>{{{sel}="max"}})')
        return PoolMetric(
            name=name, external=False, target=_milli(DECODE_TARGET_SHARE),
            sources=frozenset({m.TRTLLM_KV_BLOCKS}), rule=_pods_rule(m.TRTLLM_KV_BLOCKS, name,
                                                                     query),
            why=f"{DECODE_TARGET_SHARE:g} of the KV-cache blocks used per pod")
    limit = (dep.spec.decode.engine.max_batch_size
             or dep.fits[Phase.DECODE].max_concurrent_seqs)
    target = max(1, int(limit * DECODE_TARGET_SHARE))
    name = "pdtrt_decode_active_sequences"
    query = 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>,model="decode"})'
    return PoolMetric(
        name=name, external=False, target=str(target), sources=frozenset({m.ENGINE_ACTIVE}),
        rule=_pods_rule(m.ENGINE_ACTIVE, name, query),
        why=f"{DECODE_TARGET_SHARE:g} x decode batch limit {limit} = {target} sequences per pod")


def pool_metric(dep: Deployment, phase: Phase) -> PoolMetric:
    return _prefill_metric(dep) if phase is Phase.PREFILL else _decode_metric(dep)


def _metric_spec(names: Names, metric: PoolMetric) -> dict[str, Any]:
    if metric.external:
        return {"type": "External", "external": {
            "metric": {"name": metric.name,
                       "selector": {"matchLabels": {PROM_INSTANCE: names.base}}},
            "target": {"type": "Value", "value": metric.target}}}
    return {"type": "Pods", "pods": {"metric": {"name": metric.name},
                                     "target": {"type": "AverageValue",
                                                "averageValue": metric.target}}}


def hpa(plan: DeployPlan, rp: RolePlan) -> dict[str, Any]:
    assert rp.role.phase is not None and rp.max_replicas is not None
    names = plan.names
    metric = pool_metric(plan.dep, rp.role.phase)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": plan.meta(names.workload(rp.role), rp.role),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                   "name": names.workload(rp.role)},
                "minReplicas": rp.replicas, "maxReplicas": rp.max_replicas,
                "metrics": [_metric_spec(names, metric)],
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 60, "policies": [
                        {"type": "Pods", "value": 1, "periodSeconds": 120}]},
                    "scaleDown": {"stabilizationWindowSeconds": 600, "policies": [
                        {"type": "Pods", "value": 1, "periodSeconds": 300}]}}}}


def adapter_values(dep: Deployment) -> dict[str, Any]:
    """Helm values of the prometheus-community/prometheus-adapter chart: the rules that serve
    the pools' autoscaler metrics (``rules.custom``: Pods metrics; ``rules.external``)."""
    pool = [pool_metric(dep, p) for p in Phase]
    return {"rules": {"default": False,
                      "custom": [x.rule for x in pool if not x.external],
                      "external": [x.rule for x in pool if x.external]}}

