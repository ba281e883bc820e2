"""Pools of two endpoints per phase on the real server (docs/serve.md).

One supervised deployment (``pdtrt serve --detach``) whose spec gives each phase two local
endpoints -- ``prefill`` and ``prefill_b``, ``decode`` and ``decode_b``, each its own model with
its own Python-backend process, so one can die alone. Hundreds of concurrent streams are
spread over both endpoints of each pool, every one greedy-exact; then ``decode_b``'s process
is killed and new requests fail over to ``decode`` with no client-visible error, the failover
counted, readiness never dropping (a full path exists throughout), and ``decode_b`` comes back.
"""

from __future__ import annotations

import threading
import time

import pytest
from e2e_client import ensemble_inputs, generate, metric, wait_for
from supervised_server import edited_example, kill_model, readiness, serve_detached, stop

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_STREAMS = 200
ENDPOINTS = ("prefill", "prefill_b", "decode", "decode_b")


@pytest.fixture(scope="module")
def served(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("pools")

    def edit(spec: dict) -> None:
        for phase in ("prefill", "decode"):
            spec[phase]["endpoints"] = [{"model": phase}, {"model": f"{phase}_b"}]
        # 300 streams on two shared cores: a busy instance may take longer than the default
        # 4 s to answer a probe (seen once in three full runs); this test is about exactness
        # and spread, test_self_healing about dead endpoints.
        spec["router"]["health"] = {"probe_timeout_s": 15.0}
    path = edited_example(work, "two-endpoints.yaml", edit)
    info = serve_detached(path, root, work)
    yield info, work
    stop(work)


def _counts(metrics_url: str) -> dict[str, float]:
    return {m: metric(metrics_url, "pdtrt_engine_requests_total", model=m) for m in ENDPOINTS}


def _burst(url: str, prompts: list[str], tag: str) -> dict[int, object]:
    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = generate(url, "ensemble", ensemble_inputs(prompts[i], 6),
                              request_id=f"{tag}{i}", timeout_s=120)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return results


def test_hundreds_of_concurrent_streams_are_exact_and_spread_over_both_endpoints(served):
    info, _work = served
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    prompts = [f"Request number {i} asks about item {i * 7}" for i in range(NUM_STREAMS)]
    # The oracle: the aggregated path, one request at a time.
    expected = [generate(url, "ensemble_aggregated", ensemble_inputs(p, 6)).texts
                for p in prompts]
    before = _counts(metrics_url)
    results = _burst(url, prompts, "c")
    for i in range(NUM_STREAMS):
        assert results[i].error is None and results[i].final_seen, (i, results[i].error)
        assert results[i].texts == expected[i], i
    served_by = {m: _counts(metrics_url)[m] - before[m] for m in ENDPOINTS}
    assert served_by["prefill"] + served_by["prefill_b"] == NUM_STREAMS
    assert served_by["decode"] + served_by["decode_b"] == NUM_STREAMS
    assert min(served_by.values()) >= 0.3 * NUM_STREAMS, served_by  # both endpoints work


def test_one_decode_endpoint_killed_new_requests_fail_over_without_an_error(served):
    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    metrics_url = info["endpoints"]["metrics"]
    prompts = [f"After the failure, request {i}" for i in range(8)]
    expected = [generate(url, "ensemble_aggregated", ensemble_inputs(p, 6)).texts
                for p in prompts]
    retries = metric(metrics_url, "pdtrt_router_retries_total", phase="decode")
    kill_model(work / "repo", "decode_b")
    statuses: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            statuses.append(readiness(http))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        results = _burst(url, prompts, "f")  # at once: the router has not noticed yet
    finally:
        watching.set()
        watcher.join(10)
    for i, got in results.items():
        assert got.error is None and got.final_seen and got.texts == expected[i], (i, got.error)
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_retries_total", phase="decode")
                    > retries)
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_ejections_total",
                                   phase="decode", endpoint="decode_b") >= 1)
    assert statuses and set(statuses) == {200}  # decode still serves: a full path exists
    log = (work / "server.log").read_text()  # each retry: one line with the client's id
    assert any(f"request 'f{i}': decode failed (endpoint decode_b)" in log
               and "retrying on another decode endpoint" in log for i in range(8))
    # The supervisor reloads decode_b; the router re-admits it and sends it work again.
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_healthy",
                                   phase="decode", endpoint="decode_b") == 1, timeout_s=45)
    before = metric(metrics_url, "pdtrt_engine_requests_total", model="decode_b")
    again = _burst(url, prompts, "g")
    assert all(got.error is None and got.texts == expected[i] for i, got in again.items())
    assert metric(metrics_url, "pdtrt_engine_requests_total", model="decode_b") > before
