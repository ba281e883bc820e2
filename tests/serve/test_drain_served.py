"""Drain on the real server (docs/drain.md): ``pdtrt drain decode_b`` with streams in flight on
``decode_b`` lets each of them finish, identical to its fault-free output; the command returns
once ``decode_b`` is drained; new requests go to ``decode`` only; ``--resume`` brings
``decode_b`` back.

``docs/examples/reference-cpu-pools.yaml`` served the operator's way (``pdtrt serve --detach``).
"""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from conftest import EXAMPLES
from e2e_client import ensemble_inputs, generate, metric, wait_for
from supervised_server import PDTRT, serve_detached, stop

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_STREAMS = 6
MAX_TOKENS = 120  # decode_b is mid-stream when the drain starts
CALLS = "pdtrt_router_endpoint_calls_total"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("drain")
    engines = tmp_path_factory.mktemp("pool-engines")  # serve builds the tiny engines
    info = serve_detached(EXAMPLES / "reference-cpu-pools.yaml", engines, work)
    yield info, work
    stop(work)


def _burst(url: str, prompts: list[str], tag: str) -> list[Future]:
    """Every prompt streamed at once; each future's result is its stream."""
    pool = ThreadPoolExecutor(len(prompts))
    futures = [pool.submit(generate, url, "ensemble", ensemble_inputs(p, MAX_TOKENS),
                           request_id=f"{tag}{i}", timeout_s=60) for i, p in enumerate(prompts)]
    pool.shutdown(wait=False)
    return futures


def _results(futures: list[Future]) -> list:
    return [f.result(timeout=120) for f in futures]


def _drain(work, *args: str) -> dict:
    out = subprocess.run([PDTRT, "drain", "--workdir", str(work), "decode_b", "--json", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout)["models"]["decode_b"]


def test_draining_a_decode_endpoint_loses_nothing_and_sends_it_nothing_new(served):
    info, work = served
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    prompts = [f"Drain stream {i} asks about item {i * 7}" for i in range(NUM_STREAMS)]
    expected = _results(_burst(url, prompts, "clean"))
    assert all(r.error is None and r.final_seen for r in expected)

    running = _burst(url, prompts, "drain")
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode_b") >= 2, timeout_s=30)
    state = _drain(work)  # returns once drained: its streams have finished
    assert state == {"draining": True, "num_in_flight": 0, "num_held": 0, "drained": True}
    for i, got in enumerate(_results(running)):
        assert got.error is None and got.final_seen, (i, got.error)
        assert "".join(got.texts) == "".join(expected[i].texts), i

    # the router's next probe takes decode_b out of the pool (a request it sent before that is
    # refused and retried on decode: tests/runtime/test_router_draining.py); its drain is no
    # failure; nothing new reaches it
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_healthy",
                                   endpoint="decode_b") == 0, timeout_s=20)
    before = {m: metric(metrics_url, CALLS, endpoint=m) for m in ("decode", "decode_b")}
    after = _results(_burst(url, prompts[:3], "after"))
    assert [r.error for r in after] == [None] * 3
    assert metric(metrics_url, CALLS, endpoint="decode_b") == before["decode_b"]
    assert metric(metrics_url, CALLS, endpoint="decode") >= before["decode"] + 3
    assert metric(metrics_url, "pdtrt_router_endpoint_ejections_total", endpoint="decode_b") == 0

    assert _drain(work, "--resume")["draining"] is False
    # the routers' next probe re-admits it
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_endpoint_healthy",
                                   endpoint="decode_b") == 1, timeout_s=20)
    again = _results(_burst(url, prompts[:4], "again"))
    assert [r.error for r in again] == [None] * 4
    assert metric(metrics_url, CALLS, endpoint="decode_b") > before["decode_b"]
