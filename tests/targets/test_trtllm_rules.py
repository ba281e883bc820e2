"""Each trtllm-0.21 build rule: its rejection message, or the adjustment it notes."""

from __future__ import annotations

from pathlib import Path

import pytest
from buildspecs import variant, write_spec

from pdtrt.blueprint.profiles import load_profiles, select_profile
from pdtrt.blueprint.settings import resolve_settings
from pdtrt.builder.plan import plan_build
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.errors import BuildRejected
from pdtrt.spec.load import load_deployment
from pdtrt.targets.schema import Tool, load_target_schema
from pdtrt.targets.trtllm_rules import apply_rules

SCHEMA = load_target_schema(Target.TRTLLM_0_21)


@pytest.fixture
def seed(tmp_path):
    return load_deployment(write_spec(tmp_path, variant(lambda d: None)))


def _settings(dep, phase=Phase.DECODE):
    return resolve_settings(dep, phase, select_profile(load_profiles(), dep.gpus[phase].key,
                                                       phase))


def _apply(dep, settings, *, gpu=None, weights=WeightQuant.NONE, kv=KVDType.FP8):
    return apply_rules(settings, model=dep.model, gpu=gpu or dep.gpus[settings.phase],
                       weights=weights, kv_dtype=kv, rules=SCHEMA.rules)


REJECTIONS = {
    "beam-width": (lambda s: s.with_value("max_beam_width", 4, "t"), {},
                   "max_beam_width 4: disaggregated serving needs 1"),
    "fp8-on-ampere": (lambda s: s, {"gpu": "a100-sxm"},
                      "FP8 KV cache needs SM >= 89; a100-sxm is SM 80"),
    "input-longer-than-seq": (lambda s: s.with_value("max_input_len", 5000, "t"), {},
                              "max_input_len 5000 > max_seq_len 4608"),
    "seq-beyond-model": (lambda s: s.with_value("max_seq_len", 200_000, "t"), {},
                         "max_seq_len 200000 > meta-llama/Meta-Llama-3.1-8B's "
                         "max_position_embeddings x rope factor = 131072"),
    "profiles-with-opt-tokens": (lambda s: s.with_value("opt_num_tokens", 64, "t"), {},
                                 "multiple_profiles is enabled while opt_num_tokens is set"),
    "tokens-below-block": (lambda s: s.with_value("max_num_tokens", 16, "t"), {},
                           "max_num_tokens 16 < tokens_per_block 32"),
}


@pytest.mark.parametrize("case", list(REJECTIONS), ids=list(REJECTIONS))
def test_rejection(case, seed, catalog):
    edit, kw, message = REJECTIONS[case]
    gpu = catalog.get(kw["gpu"]) if "gpu" in kw else None
    with pytest.raises(BuildRejected) as err:
        _apply(seed, edit(_settings(seed)), gpu=gpu)
    assert any(message in r for r in err.value.reasons), err.value.reasons


def test_prefill_prompt_needs_chunking_without_paged_fmha(tmp_path):
    def edit(d):
        d["prefill"]["engine"]["max_num_tokens"] = 2048  # < max_input_len 4096, FP8 KV
    dep = load_deployment(write_spec(tmp_path, variant(edit)))
    with pytest.raises(BuildRejected) as err:
        plan_build(dep, engines_root=Path("engines"))
    assert ("prefill: max_num_tokens 2048 < max_input_len 4096 while paged context FMHA is "
            "off") in err.value.message


def test_tokens_per_block_must_agree_across_profiles(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for p in load_profiles():
        data = p.model_dump(mode="json")
        if p.name == "l40s-decode":
            data["settings"]["tokens_per_block"] = 64
        import yaml
        (profiles / f"{p.name}.yaml").write_text(yaml.safe_dump(data))

    def edit(d):
        for pool in ("prefill", "decode"):
            d[pool]["engine"].pop("tokens_per_block")
    dep = load_deployment(write_spec(tmp_path, variant(edit)))
    with pytest.raises(BuildRejected) as err:
        plan_build(dep, engines_root=Path("engines"), profiles_dir=profiles)
    assert "different tokens_per_block (prefill 32, decode 64)" in err.value.message


def test_clamps_and_warnings_are_notes(seed):
    s = _settings(seed, Phase.PREFILL).with_value("max_num_tokens", 65536, "t")
    s = s.with_value("max_seq_len", 4608, "t").with_value("max_batch_size", 8, "t")
    out = _apply(seed, s)
    assert out.settings["max_num_tokens"] == 36864  # 4608 x 8, like check_max_num_tokens
    assert out.settings.values["max_num_tokens"].why.startswith("clamped like TensorRT-LLM")
    assert any("clamped to max_seq_len x max_batch_size = 36864" in n for n in out.notes)
    assert any("> 16384" in n for n in out.notes)


def test_int8_kv_turns_paged_context_fmha_off(seed):
    out = _apply(seed, _settings(seed), kv=KVDType.INT8)
    assert out.settings["use_paged_context_fmha"] == "disable"
    assert any("INT8 KV cache" in n for n in out.notes)


@pytest.mark.parametrize(("values", "message"), [
    ({"max_batchsize": 8}, "has no flag --max_batchsize (did you mean 'max_batch_size'?)"),
    ({"kv_cache_type": "blocked"}, "--kv_cache_type blocked: not one of continuous, paged"),
    ({"max_batch_size": 0}, "--max_batch_size 0: must be >= 1"),
    ({"max_batch_size": "8"}, "--max_batch_size 8: must be an integer"),
], ids=["unknown-flag", "bad-choice", "below-min", "not-int"])
def test_schema_rejects(values, message):
    with pytest.raises(BuildRejected) as err:
        SCHEMA.render(Tool.TRTLLM_BUILD, values)
    assert message in err.value.reasons[0]


def test_schema_renders_flags_and_skips_unset():
    argv = SCHEMA.render(Tool.CONVERT_CHECKPOINT, {"use_weight_only": True, "int8_kv_cache":
                                                   False, "weight_only_precision": None,
                                                   "tp_size": 2})
    assert argv == ["--use_weight_only", "--tp_size", "2"]
    assert SCHEMA.versions["tensorrt_llm"] == "0.21.0"
    assert SCHEMA.container == "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3"
