"""The PodMonitor that has the Prometheus operator scrape every pod of a deployment.

A PodMonitor, not a ServiceMonitor: the metrics are per pod (a pool's pods each hold their own
sequences and KV cache) and the pools' Services do not carry the metrics port. It scrapes the
container port named ``metrics`` (Triton's metrics endpoint, where pdtrt's custom metrics are
too) and copies the pod labels ``app.kubernetes.io/instance`` and ``component`` onto every
series (``app_kubernetes_io_instance`` ...), which is how dashboards and autoscalers find one
deployment's series. ``--monitor-label`` adds labels a Prometheus's ``podMonitorSelector`` may
require (kube-prometheus-stack: ``release=<its Helm release>``).

Fields follow the Prometheus operator's PodMonitor API, monitoring.coreos.com/v1, as of
operator v0.93.0 (checked by :mod:`pdtrt.deploy.crd` against that CRD's schema).
"""

from __future__ import annotations

from typing import Any

from pdtrt.deploy.names import LABEL_COMPONENT, LABEL_INSTANCE
from pdtrt.deploy.plan import DeployPlan

__all__ = ["SCRAPE_INTERVAL", "podmonitor"]

SCRAPE_INTERVAL = "15s"


def podmonitor(plan: DeployPlan) -> dict[str, Any]:
    names = plan.names
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": plan.meta(names.base, extra_labels=plan.options.monitor_labels),
            "spec": {"selector": {"matchLabels": names.selector()},
                     "podTargetLabels": [LABEL_INSTANCE, LABEL_COMPONENT],
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics",
                                              "interval": SCRAPE_INTERVAL}]}}
