"""What goes into a repository: limits, trtllm-0.21 ranks and environment, atomic writes."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from pdtrt import envvars
from pdtrt.blueprint.manifest import EngineManifest, KVLayout, write_manifest
from pdtrt.engine_io import ModelName, Param
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.errors import RepoError
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.pbtxt import parse_config
from pdtrt.repo.plan import plan_repo
from pdtrt.repo.write import write_tree
from pdtrt.spec.load import load_deployment
from pdtrt.targets.trtllm_launch import EnginePlacement, plan_launch, transfer_buffer_size
from tests.conftest import EXAMPLES, ROOT


@pytest.fixture(scope="module")
def llama():
    return load_deployment(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")


def _params(plan, name):
    return dict(next(m for m in plan.models if m.name == name).parameters)


def test_trtllm_world_size_and_ids(llama, tmp_path):
    plan = plan_repo(llama, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    assert plan.launch.world_size == 1 + 1 * 1 + 2 * 1  # orchestrator + prefill + 2 decode
    prefill, decode = _params(plan, "prefill"), _params(plan, "decode")
    assert (prefill["participant_ids"], prefill["gpu_device_ids"]) == ("1", "0")
    assert (decode["participant_ids"], decode["gpu_device_ids"]) == ("2;3", "0;1")
    assert prefill["gpt_model_path"] == str(tmp_path / "llama3-8b-h100-l40s-trtllm-0.21" /
                                            "prefill")
    assert prefill["enable_kv_cache_reuse"] == "false"
    assert prefill["recv_poll_period_ms"] == "1"
    assert prefill["gpt_model_type"] == "inflight_fused_batching"
    assert len(plan.launch.rank_commands) == 4
    assert "--load-model=prefill --load-model=decode" in plan.launch.rank_commands[1]
    assert "--model-control-mode" not in plan.launch.rank_commands[0]


def test_both_mode_adds_aggregated_ranks_on_the_prefill_gpus(llama, tmp_path):
    plan = plan_repo(llama, mode=RepoMode.BOTH, engines_root=tmp_path)
    agg = _params(plan, "aggregated")
    assert plan.launch.world_size == 5
    assert (agg["participant_ids"], agg["gpu_device_ids"]) == ("4", "1")  # 2nd H100
    assert _params(plan, "router")[Param.AGGREGATED_MODEL] == "aggregated"


def test_ranks_with_tensor_parallelism():
    from pdtrt.spec.load import parse_spec
    spec, _ = parse_spec((EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text())
    launch = plan_launch(spec, [
        EnginePlacement(model="prefill", phase=Phase.PREFILL,
                        gpu="h100-sxm", tp=2, pp=1, instances=2),
        EnginePlacement(model="decode", phase=Phase.DECODE,
                        gpu="h100-sxm", tp=1, pp=2, instances=1)],
        image="img", mounts=["/b", "/a", "/b"])
    assert launch.world_size == 1 + 4 + 2
    assert launch.rank_plan("prefill").participant_ids_param == "1,2;3,4"
    assert launch.rank_plan("prefill").gpu_device_ids_param == "0,1;2,3"
    assert launch.rank_plan("decode").participant_ids_param == "5,6"
    assert launch.rank_plan("decode").gpu_device_ids_param == "4,5"  # same GPU type: one host
    assert launch.mounts == ("/a", "/b")


def test_env_file_lists_only_known_variables(llama, tmp_path):
    plan = plan_repo(llama, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    env = dict(plan.launch.env)
    assert env["TRTLLM_USE_UCX_KVCACHE"] == "1" and env["UCX_TLS"] == "rc,cuda_copy,tcp"
    assert env["TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES"] == "0"
    assert "UCX_NET_DEVICES" not in env  # the spec leaves it to UCX
    assert set(env) <= set(envvars.WRITTEN)


@pytest.mark.parametrize(("num_bytes", "text"), [(512 << 20, "512MB"), (1 << 30, "1GB"),
                                                 (3 << 10, "3KB"), (1000, "1000B")])
def test_transfer_buffer_size(num_bytes, text):
    assert transfer_buffer_size(num_bytes) == text


def test_launch_script_is_valid_bash(llama, tmp_path):
    generate_repo(llama, tmp_path / "r", engines_root=tmp_path / "e")
    script = tmp_path / "r" / "launch.sh"
    assert script.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(script)], check=True)
    result = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode != 0 and "set PDTRT_SRC" in result.stderr


def test_limits_fall_back_and_come_from_manifests(tmp_path):
    dep = load_deployment(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
    plan = plan_repo(dep, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    decode = plan.limits[Phase.DECODE]
    assert decode.sources["max_batch_size"] == "fallback" and decode.max_batch_size > 1
    assert plan.limits[Phase.PREFILL].sources["max_batch_size"] == "spec"
    engine_dir = tmp_path / "llama3-8b-h100-l40s-trtllm-0.21" / "decode"
    engine_dir.mkdir(parents=True)
    write_manifest(engine_dir, EngineManifest(
        phase=Phase.DECODE, target=Target.TRTLLM_0_21, model="m", gpu_name="L40S",
        compute_capability="8.9", tp=1, pp=1, weights=WeightQuant.NONE,
        kv_layout=KVLayout(num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype=KVDType.FP8,
                           tokens_per_block=32),
        versions={"tensorrt_llm": "0.21.0"}, input_hashes={}, pdtrt_version="0.1.0",
        build_settings={"profile": "l40s-decode",
                        "settings": {"max_batch_size": {"value": 77, "source": "profile"}}}))
    plan = plan_repo(dep, mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    assert plan.limits[Phase.DECODE].max_batch_size == 77
    assert plan.limits[Phase.DECODE].sources["max_batch_size"] == "manifest"
    decode_model = next(m for m in plan.models if m.name == ModelName.DECODE)
    assert decode_model.max_batch_size == 77


def test_reference_parameters_follow_the_runtime_contract(tmp_path):
    dep = load_deployment(EXAMPLES / "reference-cpu.yaml")
    plan = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path)
    layout = tmp_path / "reference-cpu"
    assert _params(plan, "prefill") == {
        "pdtrt_role": "prefill", "engine_dir": str(layout / "prefill"), "max_batch_size": "8",
        "max_num_tokens": "2048", "max_input_len": "384", "max_seq_len": "512",
        "tokens_per_block": "16", "enable_block_reuse": "false",
        "sampler_type": "TRTLLMSampler", "kv_transfer_timeout_s": "5", "ucx_tls": "sm,tcp"}
    assert _params(plan, "aggregated")["engine_dir"] == str(layout / "prefill")
    assert _params(plan, "router") == {
        "pdtrt_role": "router", "prefill_model": "prefill", "decode_model": "decode",
        "aggregated_model": "aggregated", "aggregated_below_tokens": "0",
        "early_first_token": "true", "prefill_url": "", "decode_url": "",
        "prefill_endpoints": "", "decode_endpoints": "", "aggregated_endpoints": "",
        "fallback_to_aggregated": "false", "max_attempts": "2", "max_migrations": "2",
        "liveness_s": "1",
        "kv_transfer_deadline_s": "15",  # the spec's kv_transfer.timeout_s 5 + 10
        "probe_timeout_s": "4", "probe_interval_s": "2",
        "phase_error_output": "pdtrt_error", "phase_transport": "grpc", "phase_input_names": "",
        "max_local_prefill_tokens": "0", "max_prefill_queue_depth": "0",
        "local_prefill_limit": "256",  # the decode engine's max_num_tokens
        "routing": "least_load", "kv_overlap_weight": "1", "kv_events_interval_s": "0.2",
        "kv_block_tokens": "16",
        "max_input_len": "384", "max_seq_len": "512"}
    assert _params(plan, "preprocessing") == {"pdtrt_role": "preprocessing",
                                              "tokenizer_dir": str(layout / "tokenizer")}
    shims = {m.name: m.shim_module for m in plan.models}
    assert shims["router"] == "pdtrt.runtime.router.model"
    assert shims["decode"] == "pdtrt.runtime.engine.model"
    assert all(m.decoupled for m in plan.models if m.name in ("prefill", "decode", "router"))


def test_trtllm_tokenizer_is_the_checkpoint(tmp_path):
    spec = tmp_path / "s.yaml"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        (ROOT / "pdtrt" / "data" / "models" /
         "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    spec.write_text((EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text().replace(
        "  name: meta-llama/Meta-Llama-3.1-8B", "  name: meta-llama/Meta-Llama-3.1-8B\n"
        "  path: ckpt"))
    plan = plan_repo(load_deployment(spec), mode=RepoMode.AGGREGATED, engines_root=tmp_path)
    assert plan.tokenizer_dir == str(ckpt)
    assert str(ckpt) in plan.launch.mounts


def test_write_tree_replaces_atomically_and_refuses(tmp_path):
    out = tmp_path / "out"
    write_tree(out, {"a/config.pbtxt": "x"}, dirs=("a/1",))
    assert (out / "a" / "1").is_dir()
    with pytest.raises(RepoError, match="already exists"):
        write_tree(out, {"b": "y"})
    write_tree(out, {"b": "y"}, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (tmp_path / "file").write_text("")
    with pytest.raises(RepoError, match="not a directory"):
        write_tree(tmp_path / "file", {"b": "y"}, force=True)


def test_generated_configs_parse(tmp_path, llama):
    generate_repo(llama, tmp_path / "r", mode=RepoMode.BOTH, engines_root=tmp_path / "e")
    for path in (tmp_path / "r").glob("*/config.pbtxt"):
        parse_config(path.read_text())


def test_templates_are_dumb():
    from pdtrt.repo.render import TEMPLATES_DIR
    for path in TEMPLATES_DIR.glob("*.j2"):
        text = path.read_text()
        for forbidden in ("default", "{% if", "{% set", "{% elif", " + ", " - ", " * "):
            assert forbidden not in text, (path.name, forbidden)


def test_a_config_that_does_not_parse_is_reported_as_a_bug(tmp_path, monkeypatch, llama):
    import jinja2

    from pdtrt.repo import render as repo_render
    from pdtrt.repo.render import GeneratedConfigBug
    for path in repo_render.TEMPLATES_DIR.glob("*.j2"):
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / "model.pbtxt.j2").write_text("name: {{ name }}\nmax_batch_size: oops\n")
    monkeypatch.setattr(repo_render, "TEMPLATES_DIR", tmp_path)
    with pytest.raises(GeneratedConfigBug, match=r"BUG in pdtrt: the generated preprocessing/"):
        generate_repo(llama, tmp_path / "r", engines_root=tmp_path / "e")
    assert not (tmp_path / "r").exists()
    (tmp_path / "model.pbtxt.j2").write_text("name: {{ nmae }}\n")
    with pytest.raises(jinja2.UndefinedError):
        generate_repo(llama, tmp_path / "r", engines_root=tmp_path / "e")


def test_repo_manifest_fields(tmp_path, llama):
    import json

    from pdtrt.repo.render import spec_sha256
    generate_repo(llama, tmp_path / "r", engines_root=tmp_path / "e")
    data = json.loads((tmp_path / "r" / "pdtrt-repo.json").read_text())
    assert sorted(data) == ["deployment", "engine_dirs", "launch", "limits", "mode", "models",
                            "pdtrt_version", "remote_pools", "repo_manifest_version", "spec",
                            "spec_sha256", "target", "tokenizer_dir"]
    assert data["remote_pools"] == {}
    assert data["spec_sha256"] == spec_sha256(llama) and len(data["spec_sha256"]) == 64
    assert data["spec"]["decode"]["instances"] == 2
    assert data["launch"]["mpi_world_size"] == 4
    engines = tmp_path / "e" / "llama3-8b-h100-l40s-trtllm-0.21"
    assert data["engine_dirs"] == {"decode": str(engines / "decode"),
                                   "prefill": str(engines / "prefill")}
    assert data["tokenizer_dir"] == "meta-llama/Meta-Llama-3.1-8B"  # no model.path: a Hub id


def test_pools_with_an_endpoint_have_no_local_model_and_the_router_calls_them(tmp_path):
    dep = load_deployment(EXAMPLES / "reference-remote.yaml")
    plan = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path)
    names = {m.name for m in plan.models}
    assert "prefill" not in names and "decode" not in names
    assert {"router", "aggregated", "preprocessing", "postprocessing"} <= names
    assert plan.remote == {"prefill": "127.0.0.1:8001", "decode": "127.0.0.1:8001"}
    router = _params(plan, "router")
    assert router["prefill_url"] == router["decode_url"] == "127.0.0.1:8001"
    assert router["prefill_model"] == "prefill" and router["decode_model"] == "decode"
    # Only the decode pool remote: prefill stays local, the router calls it by BLS.
    spec = dep.spec.model_copy(update={"prefill": dep.spec.prefill.model_copy(
        update={"endpoint": None})})
    plan = plan_repo(dataclasses.replace(dep, spec=spec), mode=RepoMode.DISAGGREGATED,
                     engines_root=tmp_path)
    assert "prefill" in {m.name for m in plan.models}
    assert "decode" not in {m.name for m in plan.models}
    assert _params(plan, "router")["prefill_url"] == ""


def test_a_pools_repository_holds_only_the_pools_with_an_endpoint(tmp_path):
    dep = load_deployment(EXAMPLES / "reference-remote.yaml")
    plan = plan_repo(dep, mode=RepoMode.POOLS, engines_root=tmp_path)
    assert [m.name for m in plan.models] == ["prefill", "decode", "health"]
    assert plan.ensembles == () and plan.remote == {}  # this server *is* the remote pools
    assert _params(plan, "prefill")[Param.UCX_TLS] == _params(plan, "decode")[Param.UCX_TLS] != ""
    # one pool remote: the pools server holds that one only
    spec = dep.spec.model_copy(update={"prefill": dep.spec.prefill.model_copy(
        update={"endpoint": None})})
    plan = plan_repo(dataclasses.replace(dep, spec=spec), mode=RepoMode.POOLS,
                     engines_root=tmp_path)
    assert [m.name for m in plan.models] == ["decode", "health"]
    with pytest.raises(RepoError, match="no pool with an endpoint"):
        plan_repo(load_deployment(EXAMPLES / "reference-cpu.yaml"), mode=RepoMode.POOLS,
                  engines_root=tmp_path)


@pytest.mark.parametrize(("example", "chosen", "written"), [
    ("reference-cpu.yaml", None, "grpc"),
    ("llama3-8b-h100-l40s.yaml", None, "grpc"),
    ("llama3-8b-h100-l40s-trtllm-0.21.yaml", None, "bls"),
    ("reference-cpu.yaml", "bls", "bls"),
])
def test_phase_transport_auto_is_grpc_except_on_trtllm_0_21(tmp_path, example, chosen, written):
    """BLS streams can deadlock Triton 2.51's stub (docs/design/serve.md, "The BLS deadlock"): the
    router calls its own server over gRPC unless the target cannot give it the address or
    the spec asks for bls."""
    text = (EXAMPLES / example).read_text()
    if chosen:
        text = text.replace("\nrouter:\n", f"\nrouter:\n  phase_transport: {chosen}\n", 1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    plan = plan_repo(load_deployment(spec), mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    [router] = [m for m in plan.models if m.name == "router"]
    assert dict(router.parameters)[Param.PHASE_TRANSPORT] == written


@pytest.mark.parametrize(("example", "setting", "error"), [
    ("reference-cpu.yaml", "max_local_prefill_tokens: 257",
     "router.max_local_prefill_tokens is 257 but the decode engine takes at most 256 tokens"),
    ("llama3-8b-h100-l40s-trtllm-0.21.yaml", "max_prefill_queue_depth: 4",
     "conditional disaggregation (router.max_local_prefill_tokens, router.max_prefill_queue_"
     "depth) is not supported on trtllm-0.21"),
])
def test_conditional_disaggregation_is_refused_where_the_decode_cannot_take_it(
        tmp_path, example, setting, error):
    text = (EXAMPLES / example).read_text()
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace("\nrouter:\n", f"\nrouter:\n  {setting}\n", 1))
    with pytest.raises(RepoError) as err:
        plan_repo(load_deployment(spec), mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    assert err.value.message.startswith(error)


@pytest.mark.parametrize(("example", "reuse", "error"), [
    ("reference-cpu.yaml", False, "router.routing kv_aware needs a pool whose engine reuses "
     "KV blocks"),
    ("llama3-8b-h100-l40s-trtllm-0.21.yaml", True, "router.routing kv_aware is not supported "
     "on trtllm-0.21"),
])
def test_kv_aware_routing_is_refused_without_engines_that_publish_their_blocks(
        tmp_path, example, reuse, error):
    text = (EXAMPLES / example).read_text()
    if reuse:
        text = text.replace("    tokens_per_block:", "    enable_block_reuse: true\n"
                            "    tokens_per_block:")
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace("\nrouter:\n", "\nrouter:\n  routing: kv_aware\n", 1))
    with pytest.raises(RepoError) as err:
        plan_repo(load_deployment(spec), mode=RepoMode.DISAGGREGATED, engines_root=tmp_path)
    assert err.value.message.startswith(error)


def test_kv_aware_routing_reaches_the_router_and_block_reuse_its_pool(tmp_path):
    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    text = text.replace("\ndecode:\n  gpu: cpu\n  instances: 1\n  engine:\n",
                        "\ndecode:\n  gpu: cpu\n  instances: 1\n  engine:\n"
                        "    enable_block_reuse: true\n")
    text = text.replace("\nrouter:\n", "\nrouter:\n  routing: kv_aware\n"
                        "  kv_overlap_weight: 2.5\n  kv_events_interval_s: 0.05\n", 1)
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    plan = plan_repo(load_deployment(spec), mode=RepoMode.BOTH, engines_root=tmp_path)
    router = _params(plan, "router")
    assert {k: router[k] for k in ("routing", "kv_overlap_weight", "kv_events_interval_s",
                                   "kv_block_tokens")} == {
        "routing": "kv_aware", "kv_overlap_weight": "2.5", "kv_events_interval_s": "0.05",
        "kv_block_tokens": "16"}
    assert _params(plan, "decode")["enable_block_reuse"] == "true"
    assert _params(plan, "prefill")["enable_block_reuse"] == "false"


def test_grpc_phase_transport_is_refused_on_trtllm_0_21(tmp_path):
    spec = tmp_path / "grpc.yaml"
    text = (EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml").read_text()
    assert "\nrouter:\n" in text
    spec.write_text(text.replace("\nrouter:\n", "\nrouter:\n  phase_transport: grpc\n", 1))
    with pytest.raises(RepoError, match="phase_transport grpc is not supported on trtllm-0.21"):
        plan_repo(load_deployment(spec), mode=RepoMode.BOTH, engines_root=tmp_path)


def test_kv_capacity_routing_reaches_the_router_and_is_refused_on_trtllm_0_21(tmp_path):
    for example in ("reference-cpu.yaml", "llama3-8b-h100-l40s-trtllm-0.21.yaml"):
        text = (EXAMPLES / example).read_text()
        spec = tmp_path / "spec.yaml"
        spec.write_text(text.replace("\nrouter:\n", "\nrouter:\n  routing: kv_capacity\n", 1))
        if "0.21" in example:
            with pytest.raises(RepoError, match="kv_capacity is not supported on trtllm-0.21"):
                plan_repo(load_deployment(spec), mode=RepoMode.DISAGGREGATED,
                          engines_root=tmp_path)
        else:
            plan = plan_repo(load_deployment(spec), mode=RepoMode.DISAGGREGATED,
                             engines_root=tmp_path)
            assert _params(plan, "router")["routing"] == "kv_capacity"
