"""Pools in another Triton server, on the real server (docs/serve.md, "Pools in other Triton
servers").

The documented two-node workflow with one spec (``reference-remote.yaml``, both pools'
``endpoint`` rewritten to a free local port): the *pools* server runs ``--mode pools`` (only
prefill and decode, listening on the endpoint's port), the *front* server runs the rest
(ensemble, pre/postprocessing, router, aggregated). The front's router calls the pools over
gRPC; the KV moves between the pools server's engine instances over UCX. The session's
reference server (same engines, one server) is the oracle for the tokens.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml
from conftest import EXAMPLES, serve_reference
from e2e_client import engine_inputs, ensemble_inputs, generate, metric, wait_for

from pdtrt.repo.generate import RepoMode
from pdtrt.serve.triton_server import free_port

pytestmark = [pytest.mark.triton, pytest.mark.slow]


@pytest.fixture(scope="module")
def remote_spec(tmp_path_factory):
    spec = yaml.safe_load((EXAMPLES / "reference-remote.yaml").read_text())
    endpoint = f"127.0.0.1:{free_port()}"
    spec["prefill"]["endpoint"] = spec["decode"]["endpoint"] = endpoint
    path = tmp_path_factory.mktemp("remote-spec") / "reference-remote.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path, endpoint


@pytest.fixture(scope="module")
def pools(remote_spec, reference_engines, tmp_path_factory):
    path, endpoint = remote_spec
    root, _dep = reference_engines
    server, _prepared = serve_reference(path, root, tmp_path_factory.mktemp("pools"),
                                        mode=RepoMode.POOLS)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def front(remote_spec, pools, reference_engines, tmp_path_factory):
    path, _endpoint = remote_spec
    root, _dep = reference_engines
    server, prepared = serve_reference(path, root, tmp_path_factory.mktemp("front"))
    yield server, prepared
    server.stop()


def _models(server) -> set[str]:
    """The models the server has loaded (the readiness marker is loaded by a supervisor)."""
    client = grpcclient.InferenceServerClient(server.endpoints.grpc_url)
    try:
        return {m.name for m in client.get_model_repository_index().models
                if m.state == "READY"}
    finally:
        client.close()


def _count(server, name: str, **labels: str) -> float:
    return metric(server.endpoints.metrics_url, name, **labels)


def test_each_server_has_its_part_and_the_pools_listen_on_the_endpoint(remote_spec, pools,
                                                                       front):
    _path, endpoint = remote_spec
    server, prepared = front
    assert pools.endpoints.grpc_url == endpoint  # --mode pools: the endpoint's port
    assert _models(pools) == {"prefill", "decode"}
    names = _models(server)
    assert {"ensemble", "router", "preprocessing", "postprocessing"} <= names
    assert not {"prefill", "decode"} & names
    assert not (prepared.repository / "prefill").exists()


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "non-streaming"])
def test_remote_pools_give_the_same_tokens_and_do_the_work_on_the_other_server(
        reference_server, pools, front, stream):
    oracle, _ = reference_server
    server, _ = front
    prompt = "The quick brown fox jumps over the lazy dog"
    local = generate(oracle.endpoints.grpc_url, "ensemble", ensemble_inputs(prompt, 12,
                                                                            stream=stream))
    pulls = _count(pools, "pdtrt_kv_transfers_total", model="decode")
    routed = _count(server, "pdtrt_router_requests_total")
    remote = generate(server.endpoints.grpc_url, "ensemble", ensemble_inputs(prompt, 12,
                                                                             stream=stream),
                      request_id="via-front")
    assert local.error is None and remote.error is None and remote.final_seen
    assert remote.texts == local.texts
    assert wait_for(lambda: _count(server, "pdtrt_router_requests_total") == routed + 1)
    # The prefill and decode ran on the pools server: one KV pull there for this request.
    assert _count(pools, "pdtrt_kv_transfers_total", model="decode") == pulls + 1


def test_concurrent_streams_through_remote_pools(reference_server, front):
    oracle, _ = reference_server
    server, _ = front
    prompts = [f"Remote request {i} about item {i * 3}" for i in range(8)]
    expected = {i: generate(oracle.endpoints.grpc_url, "ensemble", ensemble_inputs(p, 6))
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


def test_cancelling_at_the_front_stops_the_remote_decode(pools, front, oracle_tok):
    server, _ = front
    no_eos = grpcclient.InferInput("end_id", [1, 1], "INT32")
    no_eos.set_data_from_numpy(np.array([[-1]], dtype=np.int32))
    cancelled = _count(pools, "pdtrt_engine_cancelled_total", model="decode")
    got = generate(server.endpoints.grpc_url, "router",
                   engine_inputs(oracle_tok.encode("Cancel me remotely"), 200, [no_eos]),
                   request_id="remote-cancel", output="output_ids", cancel_after=3)
    assert got.error is None and len(got.texts) == 3
    # The stop request went over gRPC to the pools server's decode model.
    assert wait_for(lambda: _count(pools, "pdtrt_engine_cancelled_total", model="decode")
                    == cancelled + 1)
    assert wait_for(lambda: _count(pools, "pdtrt_engine_active_sequences", model="decode")
                    == 0)
    assert wait_for(lambda: _count(server, "pdtrt_router_cancelled_total") == 1)


@pytest.fixture(scope="module")
def oracle_tok(reference_server):
    import json

    from transformers import AutoTokenizer

    _server, prepared = reference_server
    manifest = json.loads((prepared.repository / "pdtrt-repo.json").read_text())
    return AutoTokenizer.from_pretrained(manifest["tokenizer_dir"], local_files_only=True)
