"""Ended BLS streams are freed with the GIL (issue 24: the router's stub crashed in libpython).

Triton 2.51's stub frees a decoupled BLS call's response iterator -- and the numpy arrays of
every response it kept -- on its stub-to-parent thread, without the GIL, whenever the Python
object went first (``pdtrt.runtime.triton_io._EndedStreams`` has the source lines). The
``bls_churn`` test model wires every such array to a weakref callback, so a free without the
GIL kills its stub at once instead of corrupting the heap now and then. Both tests run the
router's pattern -- many concurrent streams, each dropped as soon as it ends:

- through ``pb_utils`` directly the stub dies: the Triton fact, and proof that the tripwire
  catches the bug (if a Triton upgrade fixes the stub, this test says so; it leaves one
  "segfault ... in libpython" line in the kernel log by design);
- through pdtrt's seam it survives, round after round.
"""

from __future__ import annotations

import queue
import shutil
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from fake_llm_server import MODELS, needs_triton
from supervised_server import stubs_of

from pdtrt.serve.triton_server import ServerConfig, TritonServer

pytestmark = [*needs_triton, pytest.mark.slow]

RAW, SEAM = 0, 1


@pytest.fixture
def churn_server(tmp_path):
    repo = tmp_path / "repo"
    for name in ("echo_stream", "bls_churn"):
        shutil.copytree(MODELS / name, repo / name)
    server = TritonServer(ServerConfig(repository=repo, log_path=tmp_path / "server.log"))
    endpoints = server.start(timeout_s=120)
    yield endpoints.grpc_url, repo
    server.stop(grace_s=5)


def _churn(url: str, repo, *, mode: int, streams: int, length: int,
           timeout_s: float = 60) -> int | None:
    """One bls_churn request: how many of its streams ended whole, or None when the model's
    stub died first."""
    [stub] = stubs_of(repo, "bls_churn")
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        inputs = []
        for name, value in (("STREAMS", streams), ("LEN", length), ("MODE", mode)):
            x = grpcclient.InferInput(name, [1], "INT32")
            x.set_data_from_numpy(np.array([value], dtype=np.int32))
            inputs.append(x)
        client.async_stream_infer("bls_churn", inputs)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                result, error = results.get(timeout=0.2)
            except queue.Empty:
                if stub not in stubs_of(repo, "bls_churn"):
                    return None
                continue
            assert error is None, error
            return int(result.as_numpy("DONE")[0])
        raise AssertionError(f"bls_churn neither answered nor died within {timeout_s} s")
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()


def test_python_dropping_an_ended_bls_stream_first_kills_triton_2_51s_stub(churn_server):
    url, repo = churn_server
    for _ in range(3):
        if _churn(url, repo, mode=RAW, streams=8, length=2) is None:
            break
    assert not stubs_of(repo, "bls_churn"), (
        "the stub survived BLS iterators dropped by Python before it forgot them: Triton's "
        "stub may no longer free them without the GIL; revisit triton_io._EndedStreams")


def test_the_seam_keeps_ended_bls_streams_until_the_stub_has_forgotten_them(churn_server):
    url, repo = churn_server
    for _ in range(15):
        assert _churn(url, repo, mode=SEAM, streams=32, length=4) == 32
    assert stubs_of(repo, "bls_churn")
