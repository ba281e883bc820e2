"""Model facts from a Hugging Face ``config.json``: sizes, weight bytes, KV bytes, FLOPs.

Dense decoder-only Llama-family models are supported (``llama``, ``mistral``, ``qwen2``,
``qwen3``). Mixture-of-experts and other architectures raise :class:`UnsupportedModelError`
rather than producing wrong numbers.

Formulas (per token, ``d_q = num_attention_heads * head_dim``, ``d_kv = num_kv_heads * head_dim``):

- parameters per layer: q/k/v/o projections ``h*d_q + 2*h*d_kv + d_q*h`` (+ biases), gated MLP
  ``3*h*i``, two RMSNorms ``2*h`` (+ Qwen3's q/k norms ``2*head_dim``); plus embeddings ``V*h``,
  LM head ``V*h`` unless tied, final norm ``h``.
- KV bytes per token per rank (TensorRT-LLM's KV-cache manager):
  ``layers/pp * max(kv_heads/tp, 1) * 2 * head_dim * bytes(kv dtype)``.
- prefill of ``L`` prompt tokens: ``2*P_layers*L`` for the projections, causal attention
  ``QK^T`` and ``AV``: ``4*layers*d_q * L(L+1)/2``, and the LM head once (last token only).
- decode of one token at context ``c``: ``2*P_layers + 4*layers*d_q*c + 2*V*h``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.errors import ModelConfigError, UnsupportedModelError
from pdtrt.suggest import did_you_mean

__all__ = ["ModelFacts", "builtin_model_names", "load_model_facts", "model_facts_from_config"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
_MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx")
_REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)


@dataclass(frozen=True, kw_only=True)
class ModelFacts:
    """Architecture facts of one dense decoder-only model, and the quantities derived from them."""

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    max_position_embeddings: int
    rope_scaling_type: str | None
    rope_scaling_factor: float

    def renamed(self, name: str) -> ModelFacts:
        return replace(self, name=name)

    # -- parameter counts -------------------------------------------------------------------
    @property
    def num_layer_linear_params(self) -> int:
        """Weights of all layers' linear projections (the part weight quantisation touches)."""
        h, dq, dkv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        per_layer = h * dq + 2 * h * dkv + dq * h + 3 * h * i
        return per_layer * self.num_layers

    @property
    def num_other_params(self) -> int:
        """Embeddings, LM head, norms and biases: kept in the model dtype."""
        h, v = self.hidden_size, self.vocab_size
        per_layer = 2 * h
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        if self.o_bias:
            per_layer += h
        if self.mlp_bias:
            per_layer += 2 * self.intermediate_size + h
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        lm_head = 0 if self.tie_word_embeddings else v * h
        return v * h + lm_head + h + per_layer * self.num_layers

    @property
    def num_params(self) -> int:
        return self.num_layer_linear_params + self.num_other_params

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def max_seq_len(self) -> int:
        """TensorRT-LLM's default max_seq_len: max_position_embeddings x rope factor, where
        llama3 / longrope / su scaling counts as factor 1."""
        if self.rope_scaling_type in (None, "llama3", "longrope", "su", "default"):
            return self.max_position_embeddings
        return int(self.max_position_embeddings * self.rope_scaling_factor)

    # -- bytes -------------------------------------------------------------------------------
    def weight_bytes(self, dtype: DType, quant: WeightQuant = WeightQuant.NONE) -> int:
        """Total weight bytes for the model dtype and the layers' weight quantisation."""
        linear = self.num_layer_linear_params * quant.bytes_per_param(dtype)
        return int(round(linear + self.num_other_params * dtype.num_bytes))

    def kv_bytes_per_token(self, kv_dtype: KVDType, *, tp: int = 1, pp: int = 1) -> int:
        """KV-cache bytes one token occupies on one rank (GQA-aware; heads replicate when
        ``tp > num_kv_heads``)."""
        layers_per_rank = -(-self.num_layers // pp)
        kv_heads_per_rank = max(self.num_kv_heads // tp, 1)
        return layers_per_rank * kv_heads_per_rank * 2 * self.head_dim * kv_dtype.num_bytes

    # -- FLOPs -------------------------------------------------------------------------------
    def prefill_flops(self, num_tokens: int) -> float:
        """FLOPs to prefill a prompt of ``num_tokens`` (causal attention; LM head once)."""
        n = num_tokens
        linear = 2.0 * self.num_layer_linear_params * n
        attention = 4.0 * self.num_layers * self.q_dim * n * (n + 1) / 2
        lm_head = 2.0 * self.vocab_size * self.hidden_size
        return linear + attention + lm_head

    def prefill_flops_per_token(self, num_tokens: int) -> float:
        """Average prefill FLOPs per prompt token; grows with the prompt through attention."""
        return self.prefill_flops(num_tokens) / num_tokens

    def decode_flops_per_token(self, context_len: int) -> float:
        """FLOPs to generate one token attending to ``context_len`` cached tokens."""
        linear = 2.0 * self.num_layer_linear_params
        attention = 4.0 * self.num_layers * self.q_dim * context_len
        lm_head = 2.0 * self.vocab_size * self.hidden_size
        return linear + attention + lm_head

    # -- parallelism -------------------------------------------------------------------------
    def tp_problem(self, tp: int) -> str | None:
        """Why tensor parallelism ``tp`` cannot split this model, or ``None`` if it can.

        Attention heads must split evenly; KV heads must split evenly (``kv % tp == 0``) or be
        replicated evenly (``tp % kv == 0``).
        """
        if tp < 1:
            return f"TP must be >= 1, got {tp}"
        kv = self.num_kv_heads
        if kv % tp and tp % kv:
            return (f"TP {tp} does not divide the {kv} KV heads ({kv} % {tp} = {kv % tp}) "
                    f"and is not a multiple of them")
        if self.num_heads % tp:
            return (f"TP {tp} does not divide the {self.num_heads} attention heads "
                    f"({self.num_heads} % {tp} = {self.num_heads % tp})")
        return None

    def valid_tps(self, max_tp: int = 8) -> list[int]:
        return [tp for tp in range(1, max_tp + 1) if self.tp_problem(tp) is None]


def _get(config: dict[str, Any], key: str, source: str) -> Any:
    value = config.get(key)
    if value is None:
        raise ModelConfigError(f"{source}: config.json has no '{key}'",
                               hint="point model.path at the model's Hugging Face config.json")
    return value


def model_facts_from_config(config: dict[str, Any], *, name: str, source: str) -> ModelFacts:
    """Facts from a parsed ``config.json``; raises :class:`ModelConfigError` /
    :class:`UnsupportedModelError`."""
    model_type = str(config.get("model_type", "")).lower()
    if model_type in _MOE_MODEL_TYPES or config.get("num_local_experts") or config.get(
        "num_experts"
    ):
        raise UnsupportedModelError(
            f"{source}: '{model_type}' is a mixture-of-experts model; pdtrt models dense "
            f"decoder-only models only ({', '.join(SUPPORTED_MODEL_TYPES)})",
            hint="MoE support (expert parallelism, per-expert weights) is not implemented yet",
        )
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"{source}: model_type '{model_type or '<missing>'}' is not supported"
            f"{did_you_mean(model_type, SUPPORTED_MODEL_TYPES)}",
            hint=f"supported model types: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    for key in _REQUIRED:
        _get(config, key, source)
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = config.get("head_dim") or hidden // heads
    rope = config.get("rope_scaling") or {}
    rope_type = rope.get("rope_type") or rope.get("type")
    is_qwen2 = model_type == "qwen2"
    return ModelFacts(
        name=name,
        model_type=model_type,
        num_layers=int(config["num_hidden_layers"]),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        intermediate_size=int(config["intermediate_size"]),
        vocab_size=int(config["vocab_size"]),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        qkv_bias=is_qwen2 or bool(config.get("attention_bias", False)),
        o_bias=(not is_qwen2) and bool(config.get("attention_bias", False)),
        mlp_bias=bool(config.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        max_position_embeddings=int(config.get("max_position_embeddings") or 2048),
        rope_scaling_type=str(rope_type) if rope_type else None,
        rope_scaling_factor=float(rope.get("factor", 1.0)),
    )


def _builtin_dir():
    return resources.files("pdtrt").joinpath("data/models")


def builtin_model_names() -> list[str]:
    """Names of the model configs pdtrt ships (``org/name``), e.g. ``Qwen/Qwen3-8B``."""
    return sorted(
        p.name.removesuffix(".json").replace("--", "/", 1)
        for p in _builtin_dir().iterdir()
        if p.name.endswith(".json")
    )


def _read_config(path: Path) -> dict[str, Any]:
    if path.is_dir():
        path = path / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(f"no config.json at {path}",
                               hint="give an HF checkpoint directory or its config.json") from None
    except OSError as exc:
        raise ModelConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ModelConfigError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path} is not a JSON object")
    return data


def load_model_facts(ref: str | Path) -> ModelFacts:
    """Facts for a local HF checkpoint dir / config.json, or a built-in name.

    A :class:`Path`, or a string naming an existing path, is read from disk; any other string
    is looked up among :func:`builtin_model_names`.
    """
    path = Path(ref)
    if isinstance(ref, Path) or path.exists():
        if not path.exists():
            raise ModelConfigError(f"no config.json at {path}: no such file or directory",
                                   hint="give an HF checkpoint directory or its config.json")
        if path.is_dir():
            name = path.resolve().name
        elif path.name == "config.json":
            name = path.resolve().parent.name
        else:
            name = path.stem.replace("--", "/", 1)
        return model_facts_from_config(_read_config(path), name=name, source=str(path))
    text = str(ref)
    names = builtin_model_names()
    if text in names:
        file = _builtin_dir().joinpath(text.replace("/", "--", 1) + ".json")
        config = json.loads(file.read_text(encoding="utf-8"))
        return model_facts_from_config(config, name=text, source=f"built-in {text}")
    raise ModelConfigError(
        f"model '{text}' is neither an existing path nor a built-in config"
        f"{did_you_mean(text, names)}",
        hint=f"give a local config.json / HF checkpoint dir, or one of: {', '.join(names)}",
    )
