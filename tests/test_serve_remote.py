"""Pools in another Triton server (DESIGN §3, router point 7), on the real server.

The session's reference server (A) serves prefill and decode. A second server (the *front*)
runs a repository generated from the same spec with both pools' ``endpoint`` set to A's gRPC
address: ensemble, pre/postprocessing, router and the aggregated model, no prefill or decode of
its own. Its router calls A's prefill and decode over gRPC; the KV moves between A's engine
instances over UCX as before.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from conftest import EXAMPLES, serve_reference
from e2e_client import engine_inputs, ensemble_inputs, generate, metric, wait_for

pytestmark = [pytest.mark.triton, pytest.mark.slow]


@pytest.fixture(scope="module")
def front(reference_server, reference_engines, tmp_path_factory):
    backend, _prepared = reference_server
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("front")
    spec = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    spec["prefill"]["endpoint"] = backend.endpoints.grpc_url
    spec["decode"]["endpoint"] = backend.endpoints.grpc_url
    spec_path = work / "reference-cpu-front.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    server, prepared = serve_reference(spec_path, root, work)
    yield server, prepared
    server.stop()


def _count(server, name: str, **labels: str) -> float:
    return metric(server.endpoints.metrics_url, name, **labels)


def test_the_front_server_has_no_pools_of_its_own(front):
    server, prepared = front
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    try:
        names = {m.name for m in client.get_model_repository_index().models}
    finally:
        client.close()
    assert {"ensemble", "router", "preprocessing", "postprocessing"} <= names
    assert not {"prefill", "decode"} & names
    assert not (prepared.repository / "prefill").exists()


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_remote_pools_give_the_same_tokens_and_do_the_work_on_the_other_server(
        reference_server, front, stream):
    backend, _ = reference_server
    server, _ = front
    prompt = "The quick brown fox jumps over the lazy dog"
    local = generate(backend.endpoints.grpc_url, "ensemble", ensemble_inputs(prompt, 12,
                                                                             stream=stream))
    pulls = _count(backend, "pdtrt_kv_transfers_total", model="decode")
    routed = _count(server, "pdtrt_router_requests_total")
    remote = generate(server.endpoints.grpc_url, "ensemble", ensemble_inputs(prompt, 12,
                                                                             stream=stream),
                      request_id="via-front")
    assert local.error is None and remote.error is None and remote.final_seen
    assert remote.texts == local.texts
    assert _count(server, "pdtrt_router_requests_total") == routed + 1
    # The prefill and decode ran on the backend server: one KV pull there for this request.
    assert _count(backend, "pdtrt_kv_transfers_total", model="decode") == pulls + 1


def test_concurrent_streams_through_remote_pools(reference_server, front):
    backend, _ = reference_server
    server, _ = front
    prompts = [f"Remote request {i} about item {i * 3}" for i in range(8)]
    expected = {i: generate(backend.endpoints.grpc_url, "ensemble", ensemble_inputs(p, 6))
                for i, p in enumerate(prompts)}
    results: dict[int, object] = {}

    def one(i: int) -> None:
        results[i] = generate(server.endpoints.grpc_url, "ensemble",
                              ensemble_inputs(prompts[i], 6), request_id=f"r{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for i in range(len(prompts)):
        assert results[i].error is None and results[i].texts == expected[i].texts


def test_cancelling_at_the_front_stops_the_remote_decode(reference_server, front, oracle_tok):
    backend, _ = reference_server
    server, _ = front
    no_eos = grpcclient.InferInput("end_id", [1, 1], "INT32")
    no_eos.set_data_from_numpy(np.array([[-1]], dtype=np.int32))
    cancelled = _count(backend, "pdtrt_engine_cancelled_total", model="decode")
    got = generate(server.endpoints.grpc_url, "router",
                   engine_inputs(oracle_tok.encode("Cancel me remotely"), 200, [no_eos]),
                   request_id="remote-cancel", output="output_ids", cancel_after=3)
    assert got.error is None and len(got.texts) == 3
    # The stop request went over gRPC to the backend's decode model.
    assert wait_for(lambda: _count(backend, "pdtrt_engine_cancelled_total", model="decode")
                    == cancelled + 1)
    assert wait_for(lambda: _count(backend, "pdtrt_engine_active_sequences", model="decode")
                    == 0)
    assert _count(server, "pdtrt_router_cancelled_total") == 1


@pytest.fixture(scope="module")
def oracle_tok(reference_server):
    import json

    from transformers import AutoTokenizer

    _server, prepared = reference_server
    manifest = json.loads((prepared.repository / "pdtrt-repo.json").read_text())
    return AutoTokenizer.from_pretrained(manifest["tokenizer_dir"], local_files_only=True)
