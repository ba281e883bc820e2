"""Chaos on the real server: a decode endpoint's process SIGKILLed with streams in flight loses
no request (docs/migration.md).

``docs/examples/reference-cpu-pools.yaml`` served the operator's way (``pdtrt serve --detach``):
two prefill and two decode endpoints on one server. Eight greedy streams run; once ``decode_b``
holds some of them mid-stream its Python-backend stub is SIGKILLed, as an OOM kill would. Every
stream completes without an error, each identical to its fault-free output (the router
continued the dead endpoint's streams on ``decode``), the migrations are counted, and the KV the
prefills held for the decodes is all let go.
"""

from __future__ import annotations

import threading

import pytest
from conftest import EXAMPLES
from e2e_client import ensemble_inputs, generate, metric, wait_for
from supervised_server import kill_model, serve_detached, stop

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_STREAMS = 8
MAX_TOKENS = 200  # long enough that decode_b is mid-stream when killed, short enough to be quick


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("migration")
    engines = tmp_path_factory.mktemp("pool-engines")  # serve builds the tiny engines
    info = serve_detached(EXAMPLES / "reference-cpu-pools.yaml", engines, work)
    yield info, work
    stop(work)


def _burst(url: str, prompts: list[str], tag: str
           ) -> tuple[dict[int, object], list[threading.Thread]]:
    """Every prompt streamed at once: (results by index, filled as each ends; the threads)."""
    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = generate(url, "ensemble", ensemble_inputs(prompts[i], MAX_TOKENS),
                              request_id=f"{tag}{i}", timeout_s=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    return results, threads


def test_a_decode_endpoint_killed_mid_stream_loses_no_request(served):
    info, work = served
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    prompts = [f"Migration chaos stream {i} asks about item {i * 13}" for i in range(NUM_STREAMS)]
    expected, threads = _burst(url, prompts, "clean")  # fault-free, the same way
    for t in threads:
        t.join(120)
    assert all(r.error is None and r.final_seen for r in expected.values())
    before = metric(metrics_url, "pdtrt_router_migrations_total", phase="decode")

    results, threads = _burst(url, prompts, "chaos")
    # decode_b holds streams that have started: kill it under them
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode_b") >= 2, timeout_s=30)
    kill_model(work / "repo", "decode_b")
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(NUM_STREAMS))
    for i, got in sorted(results.items()):
        assert got.error is None and got.final_seen, (i, got.error)
        assert "".join(got.texts) == "".join(expected[i].texts), i  # each token once, none lost
    assert metric(metrics_url, "pdtrt_router_migrations_total", phase="decode") > before
    # a request's histograms are observed after its final response went out: wait for them
    assert wait_for(lambda: metric(metrics_url, "pdtrt_request_migration_seconds_count") >= 1,
                    timeout_s=20)
    # the survivors let go of every KV they held for a decode (pulled, or expired at
    # kv_transfer.timeout_s)
    assert wait_for(lambda: sum(metric(metrics_url, "pdtrt_kv_held_buffers", model=m)
                                for m in ("prefill", "prefill_b")) == 0, timeout_s=20)
    log = (work / "server.log").read_text()
    assert "migrating it (died)" in log or "migrating it (stalled)" in log
