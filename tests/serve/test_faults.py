"""Failure paths on a real Triton server: KV that expires before the decode side pulls it, and a
decode engine that fails mid-stream. Both must become request errors -- never hangs -- free the
KV, and leave the server serving.

The server here is the reference deployment with a 1 s KV-transfer timeout, started with
``PDTRT_FAULT_INJECTION=decode_step:decode:fault-`` (pdtrt.runtime.faults): the decode
engine's batched step raises whenever it holds a request whose id starts with ``fault-``.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import EXAMPLES, serve_reference
from e2e_client import engine_inputs, ensemble_inputs, generate, metric, wait_for

pytestmark = [pytest.mark.triton, pytest.mark.slow]

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def fault_server(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("faults")
    spec = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    spec["kv_transfer"]["timeout_s"] = TIMEOUT_S
    spec_path = work / "reference-cpu-faults.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    server, _prepared = serve_reference(
        spec_path, root, work, env={"PDTRT_FAULT_INJECTION": "decode_step:decode:fault-"})
    yield server
    server.stop()


def _metric(server, name: str, **labels: str) -> float:
    return metric(server.endpoints.metrics_url, name, **labels)


def test_kv_not_pulled_in_time_expires_and_the_late_pull_is_a_request_error(fault_server):
    import tritonclient.grpc as grpcclient

    url = fault_server.endpoints.grpc_url
    ids = [1, 60, 61, 62, 63, 64]
    expired = _metric(fault_server, "pdtrt_kv_expired_total", model="prefill")
    ctx = generate(url, "prefill", engine_inputs(ids, 4), request_id="slow-decode",
                   parameters={"request_type": "context_only"}, output="context_phase_params")
    assert ctx.error is None and len(ctx.texts) == 1
    # The prefill side frees the KV once the timeout passes, with nobody having pulled it.
    assert wait_for(lambda: _metric(fault_server, "pdtrt_kv_expired_total",
                                    model="prefill") == expired + 1, timeout_s=10 * TIMEOUT_S)
    assert _metric(fault_server, "pdtrt_kv_held_buffers", model="prefill") == 0
    params = ctx.texts[0].reshape(1, -1).astype(np.uint8)
    cpp = grpcclient.InferInput("context_phase_params", list(params.shape), "UINT8")
    cpp.set_data_from_numpy(params)
    late = generate(url, "decode", engine_inputs(ids, 4, [cpp]),
                    parameters={"request_type": "generation_only"}, output="output_ids",
                    timeout_s=30)
    assert late.error is not None
    assert "KV transfer failed" in late.error and "kv_transfer_timeout ran out" in late.error
    assert wait_for(lambda: _metric(fault_server, "pdtrt_engine_active_sequences",
                                    model="decode") == 0)


def test_a_decode_engine_failure_is_a_request_error_and_the_server_keeps_serving(fault_server):
    url = fault_server.endpoints.grpc_url
    failed = _metric(fault_server, "pdtrt_engine_failed_total", model="decode")
    errors = _metric(fault_server, "pdtrt_router_errors_total")
    for stream in (True, False):
        got = generate(url, "ensemble", ensemble_inputs("The decode engine will fail", 16,
                                                        stream=stream),
                       request_id=f"fault-{stream}", timeout_s=60)
        assert got.error is not None, got
        assert "decode failed" in got.error and "engine failure" in got.error
        assert "injected decode-step fault" in got.error
    assert _metric(fault_server, "pdtrt_engine_failed_total", model="decode") == failed + 2
    assert wait_for(lambda: _metric(fault_server, "pdtrt_router_errors_total") == errors + 2)
    # Nothing is left held on either side, and the next request is served normally.
    assert wait_for(lambda: _metric(fault_server, "pdtrt_engine_active_sequences",
                                    model="decode") == 0)
    assert wait_for(lambda: _metric(fault_server, "pdtrt_kv_held_buffers",
                                    model="prefill") == 0)  # refreshed every 0.5 s
    ok = generate(url, "ensemble", ensemble_inputs("The decode engine will fail", 8),
                  request_id="healthy-1")
    assert ok.error is None and ok.final_seen and len(ok.texts) >= 1
