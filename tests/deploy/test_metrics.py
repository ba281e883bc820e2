"""Dashboards and autoscalers query only metric names the deployment really exports."""

from __future__ import annotations

import ast
import json
import re
import urllib.request
from pathlib import Path

import pytest

import pdtrt.front
import pdtrt.runtime
from pdtrt.deploy import metrics as m
from pdtrt.deploy.autoscale import adapter_values, pool_metric
from pdtrt.deploy.dashboard import dashboard
from pdtrt.deploy.names import names_for
from pdtrt.enums import Phase, Target
from tests.deploy.conftest import EXAMPLE_NAMES, find

# every metric name in a PromQL expression or adapter rule: pdtrt's, Triton's (nv_), `up`
METRIC_NAME = re.compile(r"\b(pdtrt_[a-z0-9_]+|nv_[a-z0-9_]+|up)\b")


def runtime_metric_names() -> set[str]:
    """The first argument of every ``MetricSpec(...)`` in pdtrt/runtime/**/*.py: what pdtrt's
    Triton models declare on the metrics port."""
    names = set()
    for path in Path(pdtrt.runtime.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "MetricSpec"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                names.add(node.args[0].value)
    return names


def front_metric_names() -> set[str]:
    """The families the OpenAI front declares with prometheus_client in pdtrt/front/metrics.py,
    by the names a scrape shows: a ``Counter("x")`` is ``x_total``."""
    path = Path(pdtrt.front.__file__).parent / "metrics.py"
    kinds = {"Counter": "_total", "Gauge": "", "Histogram": ""}
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in kinds
                and node.args and isinstance(node.args[0], ast.Constant)):
            names.add(node.args[0].value + kinds[node.func.id])
    return names


def test_pdtrt_names_are_the_runtimes_and_the_fronts_own():
    declared = runtime_metric_names()
    assert len(declared) >= 10  # the AST walk found the runtime's metric declarations
    front = front_metric_names()
    assert len(front) >= 8  # ... and the front's
    pdtrt_names = {n for t in Target for n in m.exported(t) if n.startswith("pdtrt_")}
    assert pdtrt_names - m.FRONT <= declared, pdtrt_names - m.FRONT - declared
    assert m.FRONT == front
    assert m.ROUTER | m.ENGINE | m.FRONT == pdtrt_names
    for target in Target:  # every front pod runs the OpenAI front
        assert m.FRONT <= m.exported(target)


def _exprs(example_objects, base: str) -> list[str]:
    board = json.loads(find(example_objects, "ConfigMap", f"{base}-grafana-dashboard")
                       ["data"][f"{base}.json"])
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_dashboard_queries_only_exported_metrics(deps, objects, example):
    target = deps[example].spec.target
    exprs = _exprs(objects(example), names_for(deps[example].spec.name).base)
    used = {m.family_of(name) for e in exprs for name in METRIC_NAME.findall(e)}
    assert used <= m.exported(target), used - m.exported(target)
    assert len(exprs) >= 15
    for family in m.HISTOGRAM_FAMILIES:  # each gets its percentiles
        assert any(f"histogram_quantile(0.99, sum by (le) (rate({family}_bucket" in e
                   for e in exprs), family


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_dashboard_shows_what_the_issue_asks_for(deps, example):
    board = dashboard(names_for(example), deps[example].spec.target)
    titles = [p["title"] for p in board["panels"]]
    for wanted in ("Time to first token (p50, p90, p99)", "Time per output token (TPOT) (p50, "
                   "p90, p99)", "End to end (p50, p90, p99)", "Router queue (p50, p90, p99)",
                   "Prefill (p50, p90, p99)", "KV transfer (p50, p90, p99)",
                   "Decode (p50, p90, p99)", "Failovers and ejections",
                   "Engine queue time per request, by phase", "Errors per second",
                   "Inter-token latency (OpenAI front) (p50, p90, p99)",
                   "Time to first token (OpenAI front) (p50, p90, p99)",
                   "End to end (OpenAI front) (p50, p90, p99)",
                   "OpenAI requests per second, by status"):
        assert wanted in titles
    assert ("KV transfer throughput" in titles) is (example == "reference-cpu")
    assert ("KV-cache usage, by pod" in titles) is (example != "reference-cpu")
    # what no metric carries is said, not faked; per-token ITL is exported now
    texts = [p["options"]["content"] for p in board["panels"] if p["type"] == "text"]
    assert ("Not shown yet" in titles) is (example != "reference-cpu")
    assert not any("inter-token" in t.lower() for t in texts)
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    spans = {(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]}
    assert len(spans) == len(ids)  # no two panels at one place


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_autoscalers_read_metrics_the_adapter_serves_from_exported_ones(deps, objects, example):
    dep = deps[example]
    rules = adapter_values(dep)["rules"]
    served = {r["name"]["as"] for kind in ("custom", "external") for r in rules[kind]}
    for phase in Phase:
        base = names_for(dep.spec.name).base  # the k8s name: no dots
        hpa = find(objects(example), "HorizontalPodAutoscaler", f"{base}-{phase}")
        (spec,) = hpa["spec"]["metrics"]
        metric = spec[spec["type"].lower()]["metric"]["name"]
        assert metric in served and metric == pool_metric(dep, phase).name
    for kind in ("custom", "external"):
        for rule in rules[kind]:
            used = set(METRIC_NAME.findall(rule["seriesQuery"] + rule["metricsQuery"]))
            assert used and used <= m.exported(dep.spec.target), used


def test_decode_autoscaling_signal_per_target(deps):
    assert pool_metric(deps["reference-cpu"], Phase.DECODE).target == "25"  # 0.8 x 32
    llama = deps["llama3-8b-h100-l40s-trtllm-0.21"]
    assert pool_metric(llama, Phase.DECODE).target == "800m"
    assert pool_metric(llama, Phase.PREFILL).target == "250m"  # 1000/4
    assert pool_metric(deps["reference-cpu"], Phase.PREFILL).target == "50m"  # 200 ms / 4


@pytest.mark.triton
@pytest.mark.slow
def test_a_running_reference_server_exports_every_name(reference_server):
    """The reference target's names -- pdtrt's and Triton's -- on a real server's metrics port
    (``up`` is Prometheus's own)."""
    text = urllib.request.urlopen(reference_server[0].endpoints.metrics_url).read().decode()
    served = {m.family_of(n) for n in re.findall(r"^# TYPE (\S+) ", text, re.M)}
    wanted = m.exported(Target.REFERENCE) - m.PROMETHEUS - m.FRONT  # the front: its own port
    assert wanted <= served, wanted - served
