"""The PodMonitor that has the Prometheus operator scrape every pod of a deployment.

A PodMonitor, not a ServiceMonitor: the metrics are per pod (a pool's pods each hold their own
sequences and KV cache) and the pools' Services do not carry the metrics port. It scrapes the
container port named ``metrics`` (Triton's metrics endpoint, where pdtrt's custom metrics are
too) and copies the pod labels ``app.kubernetes.io/instance`` and ``component`` onto every
series (``app_kubernetes_io_instance`` ...), which is how dashboards and autoscalers find one
deployment's series. ``--monitor-label`` adds labels a Prometheus's ``podMonitorSelector`` may
require (kube-prometheus-stack: ``release=<its Helm release>``). A second PodMonitor,
``<name>-openai``, scrapes the front pods' OpenAI front (container port ``openai``, its own
``/metrics``: the ``pdtrt_front_*`` families) with the same target labels.

Fields follow the Prometheus operator's PodMonitor API, monitoring.coreos.com/v1, as of
operator v0.93.0 (checked by :mod:`pdtrt.deploy.crd` against that CRD's schema).
"""

from __future__ import annotations

from typing import Any

from pdtrt.deploy.layout import OPENAI_PORT_NAME
from pdtrt.deploy.names import LABEL_COMPONENT, LABEL_INSTANCE, PodRole
from pdtrt.deploy.plan import DeployPlan

__all__ = ["SCRAPE_INTERVAL", "openai_podmonitor", "podmonitor"]

SCRAPE_INTERVAL = "15s"


def _podmonitor(plan: DeployPlan, name: str, selector: dict[str, str],
                port: str) -> dict[str, Any]:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": plan.meta(name, extra_labels=plan.options.monitor_labels),
            "spec": {"selector": {"matchLabels": selector},
                     "podTargetLabels": [LABEL_INSTANCE, LABEL_COMPONENT],
                     "podMetricsEndpoints": [{"port": port, "path": "/metrics",
                                              "interval": SCRAPE_INTERVAL}]}}


def podmonitor(plan: DeployPlan) -> dict[str, Any]:
    """Triton's metrics port of every pod of the deployment."""
    return _podmonitor(plan, plan.names.base, plan.names.selector(), "metrics")


def openai_podmonitor(plan: DeployPlan) -> dict[str, Any]:
    """The OpenAI front's own ``/metrics`` on the front pods."""
    return _podmonitor(plan, f"{plan.names.base}-{OPENAI_PORT_NAME}",
                       plan.names.selector(PodRole.FRONT), OPENAI_PORT_NAME)
