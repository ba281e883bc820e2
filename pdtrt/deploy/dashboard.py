"""The Grafana dashboard of a deployment: p50/p90/p99 of TTFT, time per output token, end to
end and each phase (the router's histograms), the TTFT stacked by phase (the means of the
histograms that partition it, which add up to the TTFT's mean), of the OpenAI front's TTFT,
inter-token latency (every token's gap) and end to end, its requests by status, where
prefills ran, failovers and ejections, per-phase queue time, KV transfer, in-flight sequences
and KV usage per pool, errors -- over the metrics the deployment really exports.

Every query reads only names from :mod:`pdtrt.deploy.metrics` for the deployment's target
(tests check each expression against :func:`pdtrt.deploy.metrics.exported`), filtered to one
deployment by the PodMonitor's target labels and a ``namespace`` variable. What no metric
carries yet is said in one text panel instead of being faked. The JSON is Grafana's dashboard
model (schemaVersion 39); it is written both as a file to import and inside a ConfigMap
labelled ``grafana_dashboard: "1"``, which kube-prometheus-stack's Grafana sidecar loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdtrt.deploy import metrics as m
from pdtrt.deploy.names import PROM_COMPONENT, PROM_INSTANCE, Names
from pdtrt.enums import Target
from pdtrt.targets.registry import target_support

__all__ = ["SCHEMA_VERSION", "SIDECAR_LABEL", "Panel", "Query", "dashboard", "dashboard_configmap",
           "dashboard_text", "panels"]

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"
SIDECAR_LABEL = "grafana_dashboard"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True, kw_only=True)
class Panel:
    title: str
    description: str
    unit: str = "short"
    queries: tuple[Query, ...] = ()
    text: str | None = None  # a markdown panel instead of a graph
    row: str = ""  # the row it sits under
    stack: bool = False  # the queries' series stacked (parts of one whole)
    total: Query | None = None  # a stacked panel's whole, a line over the stack


def _not_yet(gpu: bool) -> str | None:
    """What no metric of the deployment carries (None: nothing)."""
    lines = []
    if gpu:
        lines.append("- **KV-transfer time and bytes**: TensorRT-LLM's backend does not report "
                     "them in orchestrator mode.")
    return "Not exported yet, so not shown:\n\n" + "\n".join(lines) if lines else None


def _ratio(num: str, den: str, sel: str, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return (f"sum{group} (rate({num}{{{sel}}}{RATE})) / "
            f"sum{group} (rate({den}{{{sel}}}{RATE}))")


_QUANTILES = (0.5, 0.9, 0.99)


def _percentiles(family: str, sel: str, what: str = "") -> tuple[Query, ...]:
    """p50 / p90 / p99 of a histogram family over the rate window (legend ``what pNN``)."""
    return tuple(Query(f"histogram_quantile({q}, sum by (le) (rate({family}_bucket{{{sel}}}"
                       f"{RATE})))", f"{what} p{round(q * 100)}".strip()) for q in _QUANTILES)


# (row, title, family, unit, what): the router's per-request histograms, drawn as percentiles
_HISTOGRAM_PANELS = (
    ("Latency (router, per request)", "Time to first token", m.REQUEST_TTFT, "s",
     "From the router taking the request to its first token sent."),
    ("Latency (router, per request)", "Time per output token (TPOT)", m.REQUEST_TPOT, "s",
     "A request's mean gap between output tokens: (last - first token) / (tokens - 1)."),
    ("Latency (router, per request)", "End to end", m.REQUEST_E2E, "s",
     "From the router taking the request to its final response."),
    ("Latency (router, per request)", "Router queue", m.REQUEST_QUEUE, "s",
     "From the router taking the request to its first phase call (endpoint choice, retried "
     "prefills)."),
    ("Phases (per request)", "Prefill", m.REQUEST_PREFILL, "s",
     "The prefill call to its answer (first token and KV handle) at the router."),
    ("Phases (per request)", "KV transfer", m.REQUEST_KV_TRANSFER, "s",
     "The decode call to its first response: the KV pull and the hand-over to decode."),
    ("Phases (per request)", "Decode", m.REQUEST_DECODE, "s",
     "The decode's first response to its last."),
)
# the OpenAI front's histograms (pdtrt.front.metrics), drawn the same way
_FRONT_HISTOGRAM_PANELS = (
    ("OpenAI front", "Inter-token latency (OpenAI front)", m.FRONT_ITL, "s",
     "Every gap between two token responses of a request, as the OpenAI front receives them "
     "(the per-token distribution; the router's TPOT is one mean per request)."),
    ("OpenAI front", "Time to first token (OpenAI front)", m.FRONT_TTFT, "s",
     "From the front receiving the HTTP request (tokenization included) to its first token."),
    ("OpenAI front", "End to end (OpenAI front)", m.FRONT_E2E, "s",
     "From the front receiving the HTTP request to its last token."),
)


def _mean(family: str, sel: str) -> str:
    """The mean of a histogram family's observations over the rate window."""
    return _ratio(f"{family}_sum", f"{family}_count", sel)


# the TTFT's parts in the order a request passes them: (legend, histogram family)
_TTFT_PARTS = (("queue", m.REQUEST_QUEUE),
               *zip(("prefill", "decode queue", "KV transfer", "first decode"),
                    m.REQUEST_TTFT_PHASES, strict=True))


def _ttft_phase_panels(sel: str) -> tuple[Panel, ...]:
    """The TTFT by phase: the means stacked (they add up to the mean TTFT, drawn over them)
    and the p99 of each phase (percentiles do not add up: which phase makes the tail)."""
    return (
        Panel(row="Phases (per request)", title="Time to first token by phase (mean, stacked)",
              unit="s", stack=True,
              description="Where the mean TTFT went, request by request: the router's queue, "
              "prefill (to the decode call, or to the first token when it leaves with the "
              "prefill's answer), the decode engine's queue, the KV pull and the decode's "
              "first step; a phase after the first token counts 0. The stack adds up to the "
              "mean TTFT (the line).",
              queries=tuple(Query(_mean(family, sel), legend) for legend, family in _TTFT_PARTS),
              total=Query(_mean(m.REQUEST_TTFT, sel), "TTFT (mean)")),
        Panel(row="Phases (per request)", title="Time to first token by phase (p99 of each)",
              unit="s",
              description="The p99 of each phase's part of the TTFT: which phase makes the "
              "tail (percentiles do not add up to the TTFT's).",
              queries=tuple(Query(f"histogram_quantile(0.99, sum by (le) (rate({family}_bucket"
                                  f"{{{sel}}}{RATE})))", f"{legend} p99")
                            for legend, family in _TTFT_PARTS)),
    )


def panels(target: Target, sel: str) -> tuple[Panel, ...]:
    """The panels of a ``target`` deployment; ``sel`` is the PromQL label filter of it."""
    comp = PROM_COMPONENT
    gpu = target_support(target).needs_gpu
    out = [
        Panel(row="Requests (front)", title="Requests per second", unit="reqps",
              description="Requests the router took, ended in an error, or saw cancelled.",
              queries=(Query(f"sum (rate({m.ROUTER_REQUESTS}{{{sel}}}{RATE}))", "routed"),
                       Query(f"sum (rate({m.ROUTER_ERRORS}{{{sel}}}{RATE}))", "errors"),
                       Query(f"sum (rate({m.ROUTER_CANCELLED}{{{sel}}}{RATE}))", "cancelled"))),
        Panel(row="Requests (front)", title="Tokens per request", unit="short",
              description="Prompt and output tokens per request that succeeded (p50, p90, "
              "p99).",
              queries=(*_percentiles(m.REQUEST_INPUT_TOKENS, sel, "in"),
                       *_percentiles(m.REQUEST_OUTPUT_TOKENS, sel, "out"))),
        Panel(row="Requests (front)", title="Failovers and ejections", unit="short",
              description="Phase calls retried on another endpoint (by phase), requests sent "
              "to the aggregated path after a failure, calls ended by a silent endpoint, and "
              "endpoint ejections, over the window.",
              queries=(Query(f"sum by (phase) (increase({m.ROUTER_RETRIES}{{{sel}}}{RATE}))",
                             "retries {{phase}}"),
                       Query(f"sum (increase({m.ROUTER_FALLBACKS}{{{sel}}}{RATE}))",
                             "fallbacks"),
                       Query(f"sum (increase({m.ROUTER_STALLED}{{{sel}}}{RATE}))", "stalled"),
                       Query(f"sum by (endpoint) (increase({m.ROUTER_EJECTIONS}{{{sel}}}{RATE}))",
                             "ejected {{endpoint}}"))),
        Panel(row="Requests (front)", title="Where prefills ran, by reason", unit="reqps",
              description="Requests per second by prefill path -- aggregated, local (the "
              "decode endpoint itself: conditional disaggregation) or remote -- and why.",
              queries=(Query(f"sum by (path, reason) (rate({m.ROUTER_PREFILL_PATHS}{{{sel}}}"
                             f"{RATE}))", "{{path}} ({{reason}})"),)),
        Panel(row="Requests (front)", title="Healthy endpoints, by phase", unit="short",
              description="Endpoints answering their health probes (ejected ones count 0).",
              queries=(Query(f"sum by (phase) ({m.ROUTER_HEALTHY}{{{sel}}})", "{{phase}}"),)),
        Panel(row="OpenAI front", title="OpenAI requests per second, by status", unit="reqps",
              description="Requests the OpenAI front answered, by HTTP status; clients that "
              "hung up before the end (stopped on the server); requests being generated.",
              queries=(Query(f"sum by (status) (rate({m.FRONT_REQUESTS}{{{sel}}}{RATE}))",
                             "{{status}}"),
                       Query(f"sum (rate({m.FRONT_DISCONNECTS}{{{sel}}}{RATE}))", "hung up"),
                       Query(f"sum ({m.FRONT_IN_FLIGHT}{{{sel}}})", "in flight"))),
        Panel(row="OpenAI front", title="Tokens per request (OpenAI front)", unit="short",
              description="Prompt tokens (chat template included) and output tokens per "
              "request through the front (p50, p90, p99).",
              queries=(*_percentiles(m.FRONT_INPUT_TOKENS, sel, "in"),
                       *_percentiles(m.FRONT_OUTPUT_TOKENS, sel, "out"))),
        *(Panel(row=row, title=f"{title} (p50, p90, p99)", unit=unit, description=what,
                queries=_percentiles(family, sel))
          for row, title, family, unit, what in _FRONT_HISTOGRAM_PANELS + _HISTOGRAM_PANELS),
        *_ttft_phase_panels(sel),
        Panel(row="Phases (per request)", title="Engine queue time per request, by phase",
              unit="s",
              description="Time a request waited in each phase before it was scheduled, as the "
              "router measures it (the prefill queue drives the prefill autoscaler).",
              queries=(Query(_ratio(m.PREFILL_QUEUE_SECONDS, m.ROUTER_REQUESTS, sel), "prefill"),
                       Query(_ratio(m.DECODE_QUEUE_SECONDS, m.ROUTER_REQUESTS, sel), "decode"))),
    ]
    if not gpu:
        out += [
            Panel(row="Phases (per request)", title="KV transfer time per pull (mean)", unit="s",
                  description="Seconds a decode pod spent pulling one request's KV cache "
                  "from a prefill pod over UCX.",
                  queries=(Query(_ratio(m.KV_TRANSFER_SECONDS, m.KV_TRANSFERS, sel), "pull"),)),
            Panel(row="Phases (per request)", title="KV transfer throughput", unit="Bps",
                  description="KV-cache bytes the decode pods pulled per second.",
                  queries=(Query(f"sum (rate({m.KV_TRANSFER_BYTES}{{{sel}}}{RATE}))",
                                 "bytes/s"),)),
            Panel(row="Pools", title="Sequences in flight, by pod", description="Sequences "
                  "each engine holds (waiting or running); the decode autoscaler's signal.",
                  queries=(Query(f"sum by ({comp}, pod) ({m.ENGINE_ACTIVE}{{{sel}}})",
                                 f"{{{{{comp}}}}} {{{{pod}}}}"),)),
            Panel(row="Pools", title="KV caches held for a decode pull, by pod",
                  description="Prefill KV caches not yet pulled by a decode pod (freed on pull, "
                  "on stop, or after kv_transfer.timeout_s).",
                  queries=(Query(f"sum by (pod) ({m.KV_HELD}{{{sel}}})", "{{pod}}"),)),
        ]
    else:
        kv = f"{sel},kv_cache_block_type"
        out += [
            Panel(row="Pools", title="Requests in flight, by pod", description="Active "
                  "requests of TensorRT-LLM's executor in each pool pod.",
                  queries=(Query(f'sum by ({comp}, pod) ({m.TRTLLM_REQUESTS}{{{sel},'
                                 f'request_type="active"}})', f"{{{{{comp}}}}} {{{{pod}}}}"),)),
            Panel(row="Pools", title="KV-cache usage, by pod", unit="percentunit",
                  description="Used / max KV-cache blocks; the decode autoscaler's signal.",
                  queries=(Query(f'sum by ({comp}, pod) ({m.TRTLLM_KV_BLOCKS}{{{kv}="used"}}) '
                                 f'/ sum by ({comp}, pod) ({m.TRTLLM_KV_BLOCKS}{{{kv}="max"}})',
                                 f"{{{{{comp}}}}} {{{{pod}}}}"),)),
        ]
    util, what = ((m.GPU_UTILIZATION, "GPU") if gpu else
                  (m.CPU_UTILIZATION, "CPU"))
    out += [
        Panel(row="Pools", title="Pods up, by role", description="Pods Prometheus scrapes "
              "successfully, per role (front, prefill, decode).",
              queries=(Query(f"count by ({comp}) ({m.UP}{{{sel}}} == 1)",
                             f"{{{{{comp}}}}}"),)),
        Panel(row="Pools", title=f"{what} utilization, by pod", unit="percentunit",
              description=f"Triton's {what} utilization of each pod.",
              queries=(Query(f"avg by (pod) ({util}{{{sel}}})", "{{pod}}"),)),
        Panel(row="Errors", title="Errors per second", unit="reqps",
              description="Requests the router failed, and failed inferences per Triton model "
              "(a phase's errors show on its model).",
              queries=(Query(f"sum (rate({m.ROUTER_ERRORS}{{{sel}}}{RATE}))", "router"),
                       Query(f"sum by (model) (rate({m.INFERENCE_FAILURE}{{{sel}}}{RATE}))",
                             "{{model}}"))),
    ]
    if not gpu:
        out.append(Panel(row="Errors", title="Engine failures and expired KV", unit="short",
                         description="Requests that ended in an engine error; KV caches freed "
                         "because no decode pulled them in time (increase over the window).",
                         queries=(Query(f"sum (increase({m.ENGINE_FAILED}{{{sel}}}{RATE}))",
                                        "engine failures"),
                                  Query(f"sum (delta({m.KV_EXPIRED}{{{sel}}}{RATE}))",
                                        "KV expired"))))
    out += [
        Panel(row="Triton", title="Inferences per second, by model", unit="reqps",
              description="Successful inference requests per Triton model.",
              queries=(Query(f"sum by (model) (rate({m.INFERENCE_SUCCESS}{{{sel}}}{RATE}))",
                             "{{model}}"),)),
        Panel(row="Triton", title="Triton queue time per request, by model", unit="s",
              description="Time requests waited in Triton's scheduler before execution.",
              queries=(Query(f"{_ratio(m.QUEUE_DURATION_US, m.INFERENCE_SUCCESS, sel, 'model')}"
                             " / 1e6", "{{model}}"),)),
    ]
    if (missing := _not_yet(gpu)) is not None:
        out.append(Panel(row="Triton", title="Not shown yet", description="", text=missing))
    return tuple(out)


def _panel_json(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    out: dict[str, Any] = {"id": pid, "title": panel.title, "description": panel.description,
                           "gridPos": {"h": 8, "w": 12, "x": x, "y": y}}
    if panel.text is not None:
        return {**out, "type": "text", "options": {"mode": "markdown", "content": panel.text}}
    defaults: dict[str, Any] = {"unit": panel.unit}
    overrides: list[dict[str, Any]] = []
    queries = panel.queries
    if panel.stack:
        defaults["custom"] = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 60}
    if panel.total is not None:  # a line over the stack, not a part of it
        queries += (panel.total,)
        overrides.append({"matcher": {"id": "byName", "options": panel.total.legend},
                          "properties": [{"id": "custom.stacking", "value": {"mode": "none"}},
                                         {"id": "custom.fillOpacity", "value": 0}]})
    return {**out, "type": "timeseries", "datasource": DATASOURCE,
            "fieldConfig": {"defaults": defaults, "overrides": overrides},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": q.expr,
                         "legendFormat": q.legend} for i, q in enumerate(queries)]}


def _layout(items: tuple[Panel, ...]) -> list[dict[str, Any]]:
    """Rows of two panels, a row header before each new ``row``."""
    out: list[dict[str, Any]] = []
    y, col, row = 0, 0, None
    for panel in items:
        if panel.row != row:
            y += 8 if col else 0
            out.append({"id": len(out) + 1, "type": "row", "title": panel.row, "collapsed": False,
                        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
            y, col, row = y + 1, 0, panel.row
        out.append(_panel_json(panel, len(out) + 1, 12 * col, y))
        y, col = (y + 8, 0) if col else (y, 1)
    return out


def dashboard(names: Names, target: Target) -> dict[str, Any]:
    """Grafana's dashboard model of one deployment (a ``datasource`` and a ``namespace``
    variable; every query filtered to this deployment)."""
    sel = f'namespace="$namespace",{PROM_INSTANCE}="{names.base}"'
    namespaces = f'label_values({m.UP}{{{PROM_INSTANCE}="{names.base}"}}, namespace)'
    return {
        "title": f"pdtrt {names.base}", "uid": f"pdtrt-{names.base}"[:40],
        "description": f"pdtrt deployment {names.base} ({target}): generated by pdtrt deploy "
                       "k8s -- regenerate, do not edit",
        "tags": ["pdtrt", str(target)], "schemaVersion": SCHEMA_VERSION, "version": 1,
        "editable": True, "timezone": "browser", "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"}, "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "hide": 0},
            {"name": "namespace", "label": "Namespace", "type": "query",
             "datasource": DATASOURCE, "definition": namespaces,
             "query": {"query": namespaces, "refId": "namespaces"}, "refresh": 2, "hide": 0,
             "includeAll": False, "multi": False},
        ]},
        "panels": _layout(panels(target, sel)),
    }


def dashboard_text(names: Names, target: Target) -> str:
    return json.dumps(dashboard(names, target), indent=2, sort_keys=True) + "\n"


def dashboard_configmap(names: Names, target: Target, meta: dict[str, Any]) -> dict[str, Any]:
    """The dashboard in a ConfigMap for Grafana's dashboard sidecar (``meta``: the object's
    metadata, labelled :data:`SIDECAR_LABEL` ``"1"``)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
            "data": {f"{names.base}.json": dashboard_text(names, target)}}
