"""A generated reference repository loads in the real (embedded) Triton 2.51 and streams.

The pdtrt runtime shims are replaced by stand-ins (tests/repo_stubs/), so this checks what
``pdtrt repo`` owns: every config is accepted by the server, and a streamed request flows
ensemble -> preprocessing -> router / aggregated -> postprocessing with the declared dtypes and
dims.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES, TESTS

pytestmark = [pytest.mark.triton, pytest.mark.slow]
STUBS = TESTS / "repo_stubs"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture
def server(tmp_path):
    triton = find_embedded_triton()
    if triton is None or triton.missing_parts():
        pytest.skip("the embedded Triton server (nvidia-pytriton) is not installed")
    repo = tmp_path / "repo"
    dep = load_deployment(EXAMPLES / "reference-cpu.yaml")
    generate_repo(dep, repo, mode=RepoMode.BOTH, engines_root=tmp_path / "engines")
    for model, stub in (("preprocessing", "preprocessing"), ("postprocessing", "postprocessing"),
                        ("router", "engine"), ("prefill", "engine"), ("decode", "engine"),
                        ("aggregated", "engine")):
        shutil.copy(STUBS / f"{stub}.py", repo / model / "1" / "model.py")
    backends = tmp_path / "backends" / "python"
    backends.mkdir(parents=True)
    for part in (triton.python_backend_dir / "libtriton_python.so",
                 triton.python_backend_dir / "triton_python_backend_utils.py", triton.python_stub):
        shutil.copy(part, backends / part.name)
    http, grpc, metrics = _free_ports(3)
    env = dict(os.environ, LD_LIBRARY_PATH=str(triton.library_dir),
               PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [str(triton.tritonserver), f"--model-repository={repo}",
         f"--backend-directory={backends.parent}", f"--http-port={http}", f"--grpc-port={grpc}",
         f"--metrics-port={metrics}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
         "--metrics-address=127.0.0.1"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready",
                                            timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("server not ready:\n" + (tmp_path / "server.log").read_text()[-3000:])
        yield f"127.0.0.1:{grpc}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _stream(url: str, model: str) -> list[str]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        inputs = []
        for name, arr, dtype in (("text_input", np.array([["hello"]], dtype=object), "BYTES"),
                                 ("max_tokens", np.array([[3]], dtype=np.int32), "INT32"),
                                 ("stream", np.array([[True]]), "BOOL"),
                                 ("temperature", np.array([[0.0]], dtype=np.float32), "FP32")):
            t = grpcclient.InferInput(name, list(arr.shape), dtype)
            t.set_data_from_numpy(arr)
            inputs.append(t)
        client.async_stream_infer(model, inputs, request_id="1", enable_empty_final_response=True)
        texts = []
        while True:
            result, error = results.get(timeout=30)
            assert error is None, error
            out = result.as_numpy("text_output")
            if out is not None:
                texts.append(out.reshape(-1)[0].decode())
            if result.get_response().parameters["triton_final_response"].bool_param:
                return texts
    finally:
        client.stop_stream(cancel_requests=True)  # never waits on a stream that did not end


def test_reference_repository_loads_and_streams(server):
    assert _stream(server, "ensemble") == ["100", "101", "102"]
    assert _stream(server, "ensemble_aggregated") == ["100", "101", "102"]
