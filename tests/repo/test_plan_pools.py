"""Pools of endpoints in the repository plan: one engine model per local endpoint, the router's
endpoint lists and health parameters, the pools server of several remote endpoints, the
readiness marker, and what `pdtrt repo validate` says of the result."""

from __future__ import annotations

import pytest
import yaml

from pdtrt.engine_io import Param
from pdtrt.errors import RepoError
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.plan import plan_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.runtime.router.config import RouterConfig
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES


def _dep(tmp_path, **sections):
    data = yaml.safe_load((EXAMPLES / "reference-cpu.yaml").read_text())
    for key, value in sections.items():
        data[key] = {**data[key], **value}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_deployment(path)


POOLS = dict(
    prefill={"endpoints": [{"model": "prefill"}, {"model": "prefill_b", "instances": 2}]},
    decode={"endpoints": [{"model": "decode"}, {"model": "decode_b"},
                          {"url": "10.0.0.7:8001", "instances": 4}]},
    router={"fallback_to_aggregated": True, "max_attempts": 3,
            "health": {"liveness_s": 0.5, "probe_timeout_s": 2, "probe_interval_s": 1}})


def _model(plan, name):
    return next(m for m in plan.models if m.name == name)


def test_each_local_endpoint_is_an_engine_model_and_the_router_lists_them_all(tmp_path):
    plan = plan_repo(_dep(tmp_path, **POOLS), mode=RepoMode.BOTH, engines_root=tmp_path)
    names = [m.name for m in plan.models]
    assert names == ["preprocessing", "prefill", "prefill_b", "decode", "decode_b",
                     "aggregated", "router", "postprocessing", "health"]
    assert _model(plan, "prefill_b").instance_count == 2
    assert dict(_model(plan, "decode_b").parameters)[Param.ROLE] == "decode"
    assert plan.engine_dirs["decode_b"] == plan.engine_dirs["decode"]  # one engine, two models
    params = dict(_model(plan, "router").parameters)
    assert params[Param.PREFILL_ENDPOINTS] == "prefill,prefill_b*2"
    assert params[Param.DECODE_ENDPOINTS] == "decode,decode_b,decode@10.0.0.7:8001*4"
    assert (params[Param.FALLBACK_TO_AGGREGATED], params[Param.MAX_ATTEMPTS],
            params[Param.LIVENESS_S], params[Param.PROBE_TIMEOUT_S],
            params[Param.PROBE_INTERVAL_S]) == ("true", "3", "0.5", "2", "1")
    # what the router reads back (phase_transport auto -> grpc: its server gives the address)
    config = RouterConfig.from_params(params)
    assert config.local_grpc_url({"PDTRT_SERVER_GRPC_URL": "0.0.0.0:8001"}) == "127.0.0.1:8001"
    assert [e.label for e in config.pools["decode"]] == ["decode", "decode_b",
                                                         "decode@10.0.0.7:8001"]
    assert plan.remote == {"decode": "10.0.0.7:8001"}


def test_a_generated_pools_repository_validates(tmp_path):
    out = tmp_path / "repo"
    generate_repo(_dep(tmp_path, **POOLS), out, mode=RepoMode.BOTH, engines_root=tmp_path)
    report = validate_repo(out)
    assert report.problems == ()
    assert {"prefill_b", "decode_b", "health"} <= set(report.models)


def test_the_pools_server_of_several_remote_endpoints_serves_their_model_once(tmp_path):
    dep = _dep(tmp_path, decode={"endpoints": [{"url": "10.0.0.7:8001"},
                                               {"url": "10.0.0.8:8001"}]})
    plan = plan_repo(dep, mode=RepoMode.POOLS, engines_root=tmp_path)
    assert [m.name for m in plan.models] == ["decode", "health"]
    front = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path)
    assert dict(_model(front, "router").parameters)[Param.DECODE_ENDPOINTS] == (
        "decode@10.0.0.7:8001,decode@10.0.0.8:8001")


def test_a_fallback_needs_an_aggregated_model(tmp_path):
    dep = _dep(tmp_path, router={"fallback_to_aggregated": True})
    with pytest.raises(RepoError, match="router.fallback_to_aggregated is true, but a --mode "
                       "disaggregated repository has no aggregated model"):
        plan_repo(dep, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    elsewhere = _dep(tmp_path, router={"fallback_to_aggregated": True,
                                       "aggregated_endpoints": [{"url": "10.0.0.9:8001"}]})
    plan = plan_repo(elsewhere, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    assert dict(_model(plan, "router").parameters)[Param.AGGREGATED_ENDPOINTS] == (
        "aggregated@10.0.0.9:8001")


def test_a_pool_of_one_keeps_the_one_endpoint_parameters(tmp_path):
    plan = plan_repo(load_deployment(EXAMPLES / "reference-remote.yaml"), mode=RepoMode.BOTH,
                     engines_root=tmp_path)
    params = dict(_model(plan, "router").parameters)
    assert (params[Param.DECODE_MODEL], params[Param.DECODE_URL],
            params[Param.DECODE_ENDPOINTS]) == ("decode", "127.0.0.1:8001", "")
