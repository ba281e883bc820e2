"""The 0.21 tensorrtllm backend's parameter contract, and the generated configs against it."""

from __future__ import annotations

import pytest

from pdtrt.repo.generate import RepoMode
from pdtrt.repo.plan import plan_repo
from pdtrt.spec.load import load_deployment
from pdtrt.targets.trtllm_0_21 import Trtllm021Target
from pdtrt.targets.trtllm_backend import ReadKind, load_backend_contract, parse_instances
from tests.conftest import EXAMPLES

CONTRACT = load_backend_contract()
ENGINE_MODELS = ("prefill", "decode", "aggregated")
ORCHESTRATED = {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "0"}


@pytest.fixture(scope="module")
def engine_params(tmp_path_factory):
    """The parameters of each generated engine model of the seed example (--mode both)."""
    dep = load_deployment(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
    plan = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path_factory.mktemp("e"))
    return {m.name: (dict(m.parameters), m.instance_count) for m in plan.models
            if m.name in ENGINE_MODELS}


def test_every_fact_has_its_source_line():
    names = [p.name for p in CONTRACT.parameters]
    assert len(names) == len(set(names))
    assert CONTRACT.source.commit == "c2e65b88d85255be30cf50440a91662abeb497dd"
    for p in CONTRACT.parameters:
        assert (p.line > 0) == (p.read is not ReadKind.NOT_READ), p.name
        assert (p.default is not None) == (p.read is ReadKind.GUARDED), p.name
    assert CONTRACT.source_of(CONTRACT.parameter("tokenizer_dir")) == (
        "triton-inference-server/tensorrtllm_backend@c2e65b8:inflight_batcher_llm/src/"
        "model_instance_state.cc:413")


def test_the_required_reads():
    assert CONTRACT.required == ("gpt_model_type", "tokenizer_dir",
                                 "xgrammar_tokenizer_info_path", "guided_decoding_backend",
                                 "gpt_model_path")


@pytest.mark.parametrize("model", ENGINE_MODELS)
def test_generated_configs_carry_every_required_parameter(engine_params, model):
    params, count = engine_params[model]
    assert set(CONTRACT.required) <= set(params)
    assert CONTRACT.config_problems(model, params, instance_count=count) == []


@pytest.mark.parametrize("model", ENGINE_MODELS)
def test_every_written_parameter_is_one_the_backend_reads(engine_params, model):
    """A misspelt key would be accepted by Triton and ignored by the backend."""
    params, _ = engine_params[model]
    not_read = {p.name for p in CONTRACT.parameters if p.read is ReadKind.NOT_READ}
    assert set(params) - CONTRACT.read_names == not_read & set(params)


@pytest.mark.parametrize("model", ENGINE_MODELS)
@pytest.mark.parametrize("name", CONTRACT.required)
def test_removing_a_required_parameter_fails_the_load(engine_params, model, name):
    params, count = engine_params[model]
    params = {k: v for k, v in params.items() if k != name}
    problems = CONTRACT.config_problems(model, params, instance_count=count)
    assert len(problems) == 1 and problems[0].startswith(
        f"{model}: parameter '{name}' is missing: the tensorrtllm backend of TensorRT-LLM "
        "0.21.0 does not load the model ('unexpected error when creating modelInstanceState: ")
    error = CONTRACT.load_error(params, instance_count=count, env=ORCHESTRATED,
                                path_exists=lambda _: True)
    detail = ("Both encoder and decoder model paths are empty" if name == "gpt_model_path"
              else f"Cannot find parameter with name: {name}")
    assert error == f"unexpected error when creating modelInstanceState: {detail}"


def test_the_backend_fails_on_the_first_missing_parameter_in_its_read_order():
    error = CONTRACT.load_error({}, instance_count=1, env={}, path_exists=lambda _: True)
    assert error.endswith("Cannot find parameter with name: gpt_model_type")
    error = CONTRACT.load_error({"gpt_model_type": "v1"}, instance_count=1, env={})
    assert error.endswith("Cannot find parameter with name: tokenizer_dir")


def _loadable(**changes: str) -> dict[str, str]:
    params = {name: "" for name in CONTRACT.required}
    params.update(gpt_model_type="inflight_fused_batching", gpt_model_path="/engine",
                  participant_ids="1", gpu_device_ids="0")
    params.update(changes)
    return {k: v for k, v in params.items() if v != "<drop>"}


@pytest.mark.parametrize(("params", "env", "expected"), [
    (_loadable(), ORCHESTRATED, None),
    (_loadable(participant_ids="<drop>"), ORCHESTRATED,
     "Spawning of processes was disabled in orchestrator mode, but participant IDs is missing."),
    (_loadable(participant_ids="<drop>"), {"TRTLLM_ORCHESTRATOR": "1"}, None),  # it spawns
    (_loadable(gpt_model_type="inflight"), {},
     "Invalid gpt_model_type. Must be v1/inflight_batching/inflight_fused_batching."),
    (_loadable(gpt_model_path="/nowhere"), {}, "Both encoder and decoder model paths are empty"),
    (_loadable(decoding_mode="lookahead"), {}, "Decoding mode is set to lookahead but "),
    (_loadable(participant_ids="1,2", gpu_device_ids="0,1"), {},
     "an instance needs exactly tp x pp x cp participant ids (the engine's ranks): 2 given, "
     "the engine has 1"),
], ids=["loads", "orchestrated-without-ranks", "spawning", "model-type", "no-engine",
        "lookahead", "ranks-vs-engine"])
def test_load_error(params, env, expected):
    error = CONTRACT.load_error(params, instance_count=1, env=env,
                                path_exists=lambda p: p == "/engine")
    if expected is None:
        assert error is None
    else:
        assert error is not None and expected in error


@pytest.mark.parametrize(("params", "count", "expected"), [
    ({"participant_ids": "1;x"}, 2, "parameter 'participant_ids': '1;x' is not instances of "
     "integers (';' between instances, ',' within one): instance 2 is 'x' (the backend drops "
     "it with a warning)"),
    ({"gpu_device_ids": "0,1;"}, 2, "parameter 'gpu_device_ids': '0,1;' is not instances of "
     "integers (';' between instances, ',' within one): instance 2 is '' (the backend drops it "
     "with a warning)"),
    ({"participant_ids": "2;3"}, 1, "parameter 'participant_ids' has 2 instance group(s) for 1 "
     "model instance(s): instance i takes group i modulo the groups, so instances would share "
     "ranks or GPUs"),
    ({"participant_ids": "0"}, 1, "parameter 'participant_ids' names rank 0: Rank 0 is "
     "reserved for the orchestrator"),
    ({"participant_ids": "1,2", "gpu_device_ids": "0"}, 1, "instance 1: 2 rank(s) but 1 GPU(s) "
     "x num_nodes 1: an instance's gpu_device_ids x num_nodes must equal its tp x pp x cp ranks"),
], ids=["bad-ranks", "empty-instance", "groups-vs-instances", "rank-zero", "gpus-vs-ranks"])
def test_placement_problems(params, count, expected):
    assert CONTRACT.placement_problems(params, instance_count=count) == [expected]


def test_placement_across_nodes_and_instances():
    ok = {"participant_ids": "1,2;3,4", "gpu_device_ids": "0;1", "num_nodes": "2"}
    assert CONTRACT.placement_problems(ok, instance_count=2) == []
    assert parse_instances(" 1, 2 ;3") == ((1, 2), (3,))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("enable_kv_cache_reuse", "no", "'no' is not a boolean (true/false, 1/0): the backend "
     "ignores it and uses its default (true)"),
    ("kv_cache_free_gpu_mem_fraction", "90%", "'90%' is not a number: the backend ignores it "
     "and uses its default (0.9)"),
    ("recv_poll_period_ms", "1ms", "'1ms' is not an integer: the backend ignores it and uses its "
     "default (0: the orchestrator busy-polls (tensorrtllm_backend #653))"),
    ("batch_scheduler_policy", "fcfs", "'fcfs' is not one of max_utilization, "
     "guaranteed_no_evict: the backend ignores it and uses its default (guaranteed_no_evict)"),
    ("gpt_model_type", "ifb", "'ifb' is not one of V1, v1, inflight_batching, "
     "inflight_fused_batching: the backend does not load the model ('Invalid gpt_model_type. "
     "Must be v1/inflight_batching/inflight_fused_batching.')"),
])
def test_values_the_backend_cannot_read(name, value, expected):
    params = _loadable(**{name: value})
    assert CONTRACT.config_problems("m", params, instance_count=1) == [
        f"m: parameter '{name}': {expected}"]


def test_the_target_answers_with_the_contract():
    params = _loadable(tokenizer_dir="<drop>")
    assert Trtllm021Target().engine_config_problems("m", params, instance_count=1) == \
        CONTRACT.config_problems("m", params, instance_count=1) != []
