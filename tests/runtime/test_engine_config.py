"""The LLM-API engine model's parameters: the reference target's, turned into LLM-API options,
or an LLM-API options file (pdtrt/runtime/engine/config.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pdtrt.engine_io import Param, Role
from pdtrt.runtime.engine.config import LLMEngineConfig, engine_limits

MODEL = {"vocab_size": 512, "max_position_embeddings": 512}


def _reference(role: Role, monkeypatch) -> dict[str, str]:
    monkeypatch.setattr("pdtrt.runtime.engine.config.max_beam_width", lambda _: 1)
    return {Param.ROLE: role, Param.ENGINE_DIR: "/engines/prefill", Param.MAX_BATCH_SIZE: "8",
            Param.MAX_NUM_TOKENS: "256", Param.MAX_INPUT_LEN: "128", Param.MAX_SEQ_LEN: "192",
            Param.TOKENS_PER_BLOCK: "16", Param.KV_TRANSFER_TIMEOUT_S: "1.5",
            Param.UCX_TLS: "sm,tcp"}


@pytest.mark.parametrize("role", [Role.PREFILL, Role.DECODE, Role.AGGREGATED])
def test_reference_parameters_become_llm_api_options(role, monkeypatch):
    config = LLMEngineConfig.from_params(_reference(role, monkeypatch))
    phase = {"cache_transceiver_config": {"backend": "UCX", "kv_transfer_timeout_ms": 1500}}
    assert config.model == Path("/engines/prefill") and config.ucx_tls == ("sm", "tcp")
    assert config.options == {
        "enable_iter_perf_stats": True,  # else TensorRT-LLM's get_stats returns nothing
        "max_batch_size": 8, "max_num_tokens": 256, "max_input_len": 128, "max_seq_len": 192,
        "max_beam_width": 1,
        "kv_cache_config": {"tokens_per_block": 16, "enable_block_reuse": False},
        **(phase if role is not Role.AGGREGATED else {}),
        # TensorRT-LLM 1.2 refuses context-only requests with the overlap scheduler on
        **({"disable_overlap_scheduler": True} if role is Role.PREFILL else {})}
    assert config.serves_phases is (role is not Role.AGGREGATED)
    limits = engine_limits(config, MODEL)
    assert (limits.max_input_len, limits.max_seq_len, limits.vocab_size) == (128, 192, 512)


def test_an_options_file_is_read_as_is_and_the_limits_default_like_the_llm_api(tmp_path):
    options = tmp_path / "decode.yaml"
    options.write_text("max_batch_size: 64\ncache_transceiver_config:\n  backend: UCX\n")
    config = LLMEngineConfig.from_params({Param.ROLE: Role.DECODE,
                                          Param.LLM_MODEL: "/models/llama",
                                          Param.LLM_OPTIONS: str(options)})
    assert config.options == {"max_batch_size": 64,
                              "cache_transceiver_config": {"backend": "UCX"}}
    # no kv_transfer_timeout_ms: TensorRT-LLM 1.2 holds the KV until pulled
    assert config.serves_phases and config.kv_transfer_timeout_s == math.inf
    assert config.ucx_tls == ()
    limits = engine_limits(config, MODEL)
    assert (limits.max_input_len, limits.max_seq_len, limits.max_beam_width) == (1024, 512, 1)


def test_each_instance_sees_its_own_gpus():
    p = {Param.ROLE: Role.PREFILL, Param.LLM_MODEL: "/models/llama",
         Param.GPU_DEVICE_IDS: "0,1;2,3"}
    config = LLMEngineConfig.from_params(p)
    assert config.gpu_devices == ((0, 1), (2, 3))
    assert config.visible_devices("prefill_0_0") == "0,1"
    assert config.visible_devices("prefill_0_1") == "2,3"
    with pytest.raises(ValueError, match="prefill_0_2.*2 group"):
        config.visible_devices("prefill_0_2")
    assert LLMEngineConfig.from_params({**p, Param.GPU_DEVICE_IDS: ""}).visible_devices(
        "prefill_0_5") is None


def test_unreadable_gpu_device_ids_say_the_format():
    with pytest.raises(ValueError, match=r"0,1;2,3"):
        LLMEngineConfig.from_params({Param.ROLE: Role.DECODE, Param.LLM_MODEL: "/m",
                                     Param.GPU_DEVICE_IDS: "0,a"})


def test_a_hub_name_reads_the_config_where_the_llm_api_cached_it(tmp_path, monkeypatch):
    """With model.path unset, llm_model is the Hub name: the limits come from the Hub cache the
    LLM API downloaded into, not from '<name>/config.json' relative to the working directory."""
    snapshot = tmp_path / "hub" / "models--acme--tiny" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(MODEL))
    (tmp_path / "hub" / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny" / "refs" / "main").write_text("0123abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    config = LLMEngineConfig.from_params({Param.ROLE: Role.DECODE, Param.LLM_MODEL: "acme/tiny"})
    assert engine_limits(config).vocab_size == 512


@pytest.mark.parametrize("model", ["/models/missing", "not-a-hub-name", "a/b/c"])
def test_a_model_that_is_neither_a_directory_nor_a_hub_name_says_so(model):
    config = LLMEngineConfig.from_params({Param.ROLE: Role.DECODE, Param.LLM_MODEL: model})
    with pytest.raises(ValueError, match="neither a checkpoint directory nor a Hugging Face"):
        engine_limits(config)


def test_block_reuse_in_the_parameters_turns_on_reuse_with_kv_events(monkeypatch):
    from pdtrt.runtime.engine.kv_events import events_enabled

    params = _reference(Role.DECODE, monkeypatch)
    on = LLMEngineConfig.from_params({**params, Param.ENABLE_BLOCK_REUSE: "true"}).options
    off = LLMEngineConfig.from_params({**params, Param.ENABLE_BLOCK_REUSE: "false"}).options
    assert on["kv_cache_config"]["enable_block_reuse"] and events_enabled(on)
    assert not off["kv_cache_config"]["enable_block_reuse"] and not events_enabled(off)
    assert LLMEngineConfig.from_params(params).options == off  # absent: off, as before


def test_the_sampler_parameter_becomes_sampler_type(monkeypatch):
    params = _reference(Role.PREFILL, monkeypatch)
    for sampler in ("TRTLLMSampler", "TorchSampler"):
        options = LLMEngineConfig.from_params({**params, Param.SAMPLER_TYPE: sampler}).options
        assert options["sampler_type"] == sampler
    # absent (a repository written before the parameter): LlmArgs' default, auto
    assert "sampler_type" not in LLMEngineConfig.from_params(params).options


def test_the_stream_interval_parameter_becomes_the_option(monkeypatch):
    params = _reference(Role.DECODE, monkeypatch)
    options = LLMEngineConfig.from_params({**params, Param.STREAM_INTERVAL: "4"}).options
    assert options["stream_interval"] == 4
    # absent (the prefill, or a repository written before the parameter): LlmArgs' default, 1
    assert "stream_interval" not in LLMEngineConfig.from_params(params).options


def test_the_reference_repository_gives_the_decode_and_aggregated_models_the_interval(
        tmp_path):
    from pdtrt.blueprint.triton_models import RepoMode
    from pdtrt.repo.plan import plan_repo
    from pdtrt.spec.load import load_deployment
    from tests.conftest import EXAMPLES

    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    decode = "decode:\n  gpu: cpu\n  instances: 1\n  engine:\n"
    assert decode in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text.replace(decode, decode + "    stream_interval: 4\n"))
    plan = plan_repo(load_deployment(spec), engines_root=tmp_path, mode=RepoMode.BOTH)
    params = {m.name: dict(m.parameters) for m in plan.models if m.role in
              (Role.PREFILL, Role.DECODE, Role.AGGREGATED)}
    assert params["decode"][Param.STREAM_INTERVAL] == "4"
    assert params["aggregated"][Param.STREAM_INTERVAL] == "4"
    assert Param.STREAM_INTERVAL not in params["prefill"]
