"""Model facts against hand-computed values for the real configs in shared/data/models."""

from __future__ import annotations

import json

import pytest
from conftest import BUILTIN_MODELS, models_dir

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.errors import ModelConfigError, UnsupportedModelError
from pdtrt.facts.model import builtin_model_names, load_model_facts, model_facts_from_config


def facts(stem: str):
    return load_model_facts(models_dir() / f"{stem}.json")


# Published parameter counts; each is reproduced exactly by the per-layer formula in model.py.
@pytest.mark.parametrize(
    ("stem", "num_params"),
    [
        ("meta-llama--Meta-Llama-3.1-8B", 8_030_261_248),
        ("meta-llama--Meta-Llama-3.1-70B", 70_553_706_496),
        ("meta-llama--Meta-Llama-3.1-405B", 405_853_388_800),
        ("Qwen--Qwen3-0.6B", 596_049_920),  # tied embeddings, q/k norms
        ("Qwen--Qwen3-8B", 8_190_735_360),
        ("Qwen--Qwen3-32B", 32_762_123_264),
    ],
    ids=lambda v: str(v),
)
def test_num_params(stem, num_params):
    assert facts(stem).num_params == num_params


def test_llama_8b_parameter_breakdown_by_hand():
    m = facts("meta-llama--Meta-Llama-3.1-8B")
    # per layer: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + mlp 3*4096*14336
    per_layer = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336
    assert m.num_layer_linear_params == 32 * per_layer
    # embeddings + untied LM head + 2 norms per layer + final norm
    assert m.num_other_params == 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
    assert m.head_dim == 128  # hidden / heads: the config has no head_dim


@pytest.mark.parametrize(
    ("stem", "kv_dtype", "tp", "expected"),
    [
        ("meta-llama--Meta-Llama-3.1-8B", KVDType.BF16, 1, 131_072),  # 32*8*2*128*2
        ("meta-llama--Meta-Llama-3.1-8B", KVDType.FP8, 1, 65_536),
        ("meta-llama--Meta-Llama-3.1-8B", KVDType.BF16, 2, 65_536),  # 4 KV heads per rank
        ("meta-llama--Meta-Llama-3.1-8B", KVDType.BF16, 8, 16_384),  # 1 KV head per rank
        ("meta-llama--Meta-Llama-3.1-70B", KVDType.BF16, 1, 327_680),  # 80*8*2*128*2
        ("meta-llama--Meta-Llama-3.1-70B", KVDType.FP8, 4, 40_960),
        ("Qwen--Qwen3-8B", KVDType.BF16, 1, 147_456),  # 36*8*2*128*2
        ("Qwen--Qwen3-0.6B", KVDType.BF16, 1, 114_688),  # 28*8*2*128*2
    ],
)
def test_kv_bytes_per_token(stem, kv_dtype, tp, expected):
    assert facts(stem).kv_bytes_per_token(kv_dtype, tp=tp) == expected


def test_kv_heads_replicate_beyond_their_count():
    # 405B has 8 KV heads; at TP 16 each rank still holds one whole head: max(8/16, 1) = 1.
    m = facts("meta-llama--Meta-Llama-3.1-405B")
    assert m.kv_bytes_per_token(KVDType.BF16, tp=16) == 126 * 1 * 2 * 128 * 2


def test_kv_bytes_split_by_pipeline_stages():
    m = facts("meta-llama--Meta-Llama-3.1-8B")
    assert m.kv_bytes_per_token(KVDType.BF16, pp=2) == 131_072 // 2


def test_weight_bytes_per_quantisation():
    m = facts("meta-llama--Meta-Llama-3.1-8B")
    assert m.weight_bytes(DType.BF16) == 2 * 8_030_261_248
    # FP8: linear layers 1 byte, embeddings / head / norms stay 2 bytes.
    assert m.weight_bytes(DType.BF16, WeightQuant.FP8) == (
        m.num_layer_linear_params + 2 * m.num_other_params
    )
    int4 = m.weight_bytes(DType.BF16, WeightQuant.INT4_AWQ)
    assert int4 == round(m.num_layer_linear_params * (0.5 + 2 / 128) + 2 * m.num_other_params)


def test_flops_hand_computed():
    m = facts("meta-llama--Meta-Llama-3.1-8B")
    p = m.num_layer_linear_params
    d_q = 32 * 128
    # one token of context 1000: projections + attention over 1000 tokens + LM head
    assert m.decode_flops_per_token(1000) == 2 * p + 4 * 32 * d_q * 1000 + 2 * 128256 * 4096
    # prefill of 3 tokens: causal attention over 1 + 2 + 3 positions
    assert m.prefill_flops(3) == 2 * p * 3 + 4 * 32 * d_q * 6 + 2 * 128256 * 4096


def test_prefill_flops_per_token_grow_with_context():
    m = facts("meta-llama--Meta-Llama-3.1-8B")
    assert m.prefill_flops_per_token(8000) > m.prefill_flops_per_token(1000)


def test_valid_tp():
    assert facts("meta-llama--Meta-Llama-3.1-8B").valid_tps() == [1, 2, 4, 8]
    assert "8 KV heads" in facts("meta-llama--Meta-Llama-3.1-8B").tp_problem(3)


def test_max_seq_len_llama3_rope_counts_as_one():
    # llama3 rope scaling (factor 8) does not multiply max_position_embeddings in TRT-LLM.
    assert facts("meta-llama--Meta-Llama-3.1-8B").max_seq_len == 131072


def test_moe_is_refused_clearly():
    with pytest.raises(UnsupportedModelError, match="mixture-of-experts"):
        facts("mistralai--Mixtral-8x7B-v0.1")


def test_unknown_architecture_is_refused():
    with pytest.raises(UnsupportedModelError, match="model_type 'gpt2' is not supported"):
        model_facts_from_config({"model_type": "gpt2"}, name="x", source="x")


def test_missing_field_is_named():
    config = json.loads((models_dir() / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    del config["intermediate_size"]
    with pytest.raises(ModelConfigError, match="no 'intermediate_size'"):
        model_facts_from_config(config, name="x", source="x")


def test_qwen2_has_qkv_bias():
    base = {"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
            "vocab_size": 10, "tie_word_embeddings": True}
    m = model_facts_from_config(base, name="q", source="q")
    # q bias 64 + k, v bias 2*32 on top of norms 2*64, embeddings 640, final norm 64
    assert m.num_other_params == 640 + 64 + 2 * 64 + 64 + 2 * 32


def test_checkpoint_dir_and_name(tmp_path):
    ckpt = tmp_path / "my-llama"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(
        (models_dir() / "meta-llama--Meta-Llama-3.1-8B.json").read_text())
    assert load_model_facts(ckpt).name == "my-llama"
    assert load_model_facts(ckpt / "config.json").name == "my-llama"


def test_bad_json_is_a_clear_error(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ModelConfigError, match="not valid JSON"):
        load_model_facts(bad)


def test_unknown_builtin_suggests():
    with pytest.raises(ModelConfigError, match="did you mean 'Qwen/Qwen3-8B'"):
        load_model_facts("Qwen/Qwen3-8")


def test_builtins_are_the_shared_configs():
    names = builtin_model_names()
    assert "meta-llama/Meta-Llama-3.1-8B" in names and "pdtrt/tiny-llama" in names
    if models_dir() != BUILTIN_MODELS:
        for shared in models_dir().glob("*.json"):
            assert (BUILTIN_MODELS / shared.name).read_bytes() == shared.read_bytes()


def test_tiny_llama_matches_reference_size():
    # cpu-triton.md: the tiny seeded Llama of the reference engine has 139,584 parameters.
    assert load_model_facts("pdtrt/tiny-llama").num_params == 139_584


def test_llama2_70b_builtin_matches_its_published_size():
    # pdtrt/data/models/meta-llama--Llama-2-70b-hf.json holds the values of the public HF
    # config (docs/model-facts.md); 68,976,648,192 is the count published with the model.
    m = load_model_facts("meta-llama/Llama-2-70b-hf")
    assert m.num_params == 68_976_648_192
    assert (m.num_kv_heads, m.max_seq_len, m.vocab_size) == (8, 4096, 32000)
