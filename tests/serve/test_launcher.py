"""pdtrt.serve.launcher without a server: the environment handed to tritonserver, and
repository detection."""

from __future__ import annotations

import json

from conftest import EXAMPLES, ROOT

from pdtrt.repo.generate import RepoMode
from pdtrt.serve.launcher import (
    kv_environment,
    pools_grpc_port,
    pools_warnings,
    prepare,
    server_config,
)
from pdtrt.spec.load import load_spec

GOLDEN_TRTLLM = ROOT / "tests" / "golden" / "repo" / "llama3-8b-h100-l40s-trtllm-0.21-both"


def test_environment_from_spec_and_trtllm_manifest():
    spec = load_spec(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
    manifest = json.loads((GOLDEN_TRTLLM / "pdtrt-repo.json").read_text())
    env = kv_environment(spec, manifest)
    assert env["UCX_TLS"] == manifest["launch"]["env"]["UCX_TLS"]
    assert env["TRTLLM_USE_UCX_KVCACHE"] == "1"
    assert env["TRTLLM_ORCHESTRATOR"] == "1"


def test_environment_of_the_reference_spec():
    env = kv_environment(load_spec(EXAMPLES / "reference-cpu.yaml"), {})
    assert env == {"UCX_WARN_UNUSED_ENV_VARS": "n", "UCX_TLS": "sm,tcp"}


def test_a_repository_is_served_as_is_with_its_spec(tmp_path):
    prepared = prepare(GOLDEN_TRTLLM, workdir=tmp_path, engines_root=tmp_path / "engines")
    assert prepared.repository == GOLDEN_TRTLLM.resolve()
    assert prepared.spec is not None and prepared.spec.name == "llama3-8b-h100-l40s-trtllm-0.21"
    assert prepared.built == () and prepared.mode is RepoMode.BOTH  # from pdtrt-repo.json


def test_a_pools_repository_listens_on_its_endpoint_port(tmp_path):
    pools = ROOT / "tests" / "golden" / "repo" / "reference-remote-pools"
    prepared = prepare(pools, workdir=tmp_path, engines_root=tmp_path / "engines")
    assert prepared.mode is RepoMode.POOLS
    assert server_config(prepared).grpc_port == 8001  # the example's endpoints 127.0.0.1:8001
    assert server_config(prepared, grpc_port=9000).grpc_port == 9000  # a flag wins
    front = prepare(ROOT / "tests" / "golden" / "repo" / "reference-remote-both",
                    workdir=tmp_path, engines_root=tmp_path / "engines")
    assert server_config(front).grpc_port is None  # the front: a free port
    spec = load_spec(EXAMPLES / "reference-remote.yaml")
    split = spec.model_copy(update={"decode": spec.decode.model_copy(
        update={"endpoint": "127.0.0.1:8002"})})
    assert pools_grpc_port(spec) == 8001 and pools_grpc_port(split) is None


def test_a_pools_server_says_when_the_front_could_not_reach_it(tmp_path):
    import dataclasses

    pools = prepare(ROOT / "tests" / "golden" / "repo" / "reference-remote-pools",
                    workdir=tmp_path, engines_root=tmp_path / "engines")
    assert pools_warnings(pools, server_config(pools)) == []  # 127.0.0.1:8001 on loopback
    assert pools_warnings(pools, server_config(pools, grpc_port=9000)) == [
        "the front's router dials 127.0.0.1:8001, but this server's gRPC port is 9000"]
    assert pools.spec is not None
    far = pools.spec.model_copy(update={
        pool: getattr(pools.spec, pool).model_copy(update={"endpoint": "10.0.0.2:8001"})
        for pool in ("prefill", "decode")})
    remote = dataclasses.replace(pools, spec=far)
    assert pools_warnings(remote, server_config(remote)) == [
        "the front's router dials 10.0.0.2:8001, but this server listens on 127.0.0.1 only; "
        "pass --host 0.0.0.0 (or 10.0.0.2)"]
    assert pools_warnings(remote, server_config(remote, host="0.0.0.0")) == []


def test_pdtrt_stop_unloads_the_models_only_of_a_server_in_explicit_mode(tmp_path):
    """Issue 49: ``pdtrt stop`` unloads a detached server's models before its SIGTERM when the
    state file says it runs in explicit model-control mode; an older state file (no server
    configuration) or another mode leaves the stop to Triton's own shutdown."""
    from pdtrt.serve.launcher import _unload_target
    from pdtrt.serve.model_control import EXPLICIT_MODE
    from pdtrt.serve.triton_server import ServerConfig

    def state(*args: str) -> dict[str, object]:
        config = ServerConfig(repository=tmp_path / "repo", log_path=tmp_path / "log",
                              extra_args=args)
        return {"pid": 1, "endpoints": {"http": "127.0.0.1:8000"}, "server": config.to_dict()}

    assert _unload_target(state(EXPLICIT_MODE)) == ("127.0.0.1:8000", tmp_path / "repo")
    assert _unload_target(state()) == (None, tmp_path / "repo")
    assert _unload_target({"pid": 1, "endpoints": {"http": "127.0.0.1:8000"}})[0] is None
