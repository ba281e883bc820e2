"""Triton 2.51 behaviours pdtrt's router is built around, pinned against the real server.

If a Triton upgrade changes one of them, the matching test fails and docs/design/serve.md ("Triton
2.51 facts") and the router's workaround should be revisited:

1. A client's stream cancellation reaches a decoupled model called directly, but not the
   composing model of an ensemble -> the router, called directly, is the cancellable entry.
2. A BLS caller never sees an error response its decoupled callee sends after data -> pdtrt's
   engine models also send the message in-band (``pdtrt_error``).
"""

from __future__ import annotations

import queue
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from fake_llm_server import MODELS, needs_triton

from pdtrt.serve.triton_server import ServerConfig, TritonServer

pytestmark = needs_triton


@pytest.fixture(scope="module")
def facts_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("facts")
    repo = tmp / "repo"
    for name in ("facts_stream", "facts_relay", "facts_ensemble"):
        shutil.copytree(MODELS / name, repo / name)
    log = tmp / "observed.log"
    log.write_text("")
    server = TritonServer(ServerConfig(repository=repo, log_path=tmp / "server.log",
                                       env={"PDTRT_FACTS_LOG": str(log)}))
    server.start(timeout_s=90)
    yield server, log
    server.stop()


def _stream(url: str, model: str, request_id: str, n: int, *, cancel_after: int | None = None):
    """Responses of one stream: ticks, 'error: ...' entries, 'final'; stops at final."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    seen: list = []
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        x = grpcclient.InferInput("N", [1], "INT32")
        x.set_data_from_numpy(np.array([n], dtype=np.int32))
        client.async_stream_infer(model, [x], request_id=request_id,
                                  enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=30)
            if error is not None:
                seen.append(f"error: {error.message()}")
                continue
            response = result.get_response()
            if response.outputs:
                seen.append(int(result.as_numpy("TICK")[0]))
            if response.parameters["triton_final_response"].bool_param:
                seen.append("final")
                return seen
            if cancel_after is not None and len(seen) >= cancel_after:
                client.stop_stream(cancel_requests=True)
                return seen
    finally:
        client.stop_stream(cancel_requests=True)  # never waits on a stream that did not end
        client.close()


def _observed(log, request_id: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith(request_id + " "):
                return line.split(" ", 1)[1]
        time.sleep(0.1)
    return "nothing"


def test_cancellation_reaches_a_direct_model_but_not_an_ensembles_step(facts_server):
    server, log = facts_server
    url = server.endpoints.grpc_url
    _stream(url, "facts_stream", "direct", 30, cancel_after=2)
    _stream(url, "facts_ensemble", "via-ensemble", 30, cancel_after=2)
    assert _observed(log, "direct") == "cancelled"
    assert _observed(log, "via-ensemble") == "completed"  # ran all 30 ticks (3 s)


def test_bls_drops_an_error_response_sent_after_data(facts_server):
    server, _log = facts_server
    url = server.endpoints.grpc_url
    direct = _stream(url, "facts_stream", "error-after-data", 1)
    assert direct == [0, "error: boom", "final"]
    relayed = _stream(url, "facts_relay", "error-after-data", 1)
    assert relayed == [0, "final"]  # no -1: the relay never saw the error
