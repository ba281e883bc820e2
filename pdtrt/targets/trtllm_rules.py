"""TensorRT-LLM's build-time rules, mirrored so they act before anything runs.

``trtllm-build`` silently adjusts some settings (``_init_max_seq_len`` and
``check_max_num_tokens`` in ``tensorrt_llm/builder.py`` / ``_common.py``; the FP8 and paged
context-FMHA logic of ``builder.build``). pdtrt applies the same adjustments itself, so the argv
it renders is what the engine will really be, and each adjustment becomes a note in the plan.
Combinations that would fail at build time or give an engine unfit for disaggregated serving are
rejected, every reason at once (:class:`BuildRejected`).

Not mirrored: rules for features pdtrt never enables (speculative decoding, LoRA, StreamingLLM,
encoder-decoder models).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.build.settings import EngineSettings
from pdtrt.enums import KVDType, Phase, WeightQuant
from pdtrt.errors import BuildRejected
from pdtrt.facts.catalog import GPU
from pdtrt.facts.model import ModelFacts
from pdtrt.targets.schema import TargetRules

__all__ = ["RuleOutcome", "apply_rules"]


@dataclass(frozen=True, kw_only=True)
class RuleOutcome:
    settings: EngineSettings
    notes: tuple[str, ...]


def _on(value: object) -> bool:
    return value is True or value == "enable"


def apply_rules(settings: EngineSettings, *, model: ModelFacts, gpu: GPU, weights: WeightQuant,
                kv_dtype: KVDType, rules: TargetRules) -> RuleOutcome:
    """The settings as TensorRT-LLM will build them, with a note per adjustment.

    Raises :class:`BuildRejected` with every violated rule.
    """
    s = settings
    phase = s.phase
    notes: list[str] = []
    reasons: list[str] = []
    sm = gpu.sm_version or 0
    fp8_weights = weights is WeightQuant.FP8
    fp8_kv = kv_dtype is KVDType.FP8

    if s["max_beam_width"] != rules.max_beam_width:
        reasons.append(f"{phase}: max_beam_width {s['max_beam_width']}: disaggregated serving "
                       f"needs {rules.max_beam_width}")
    if (fp8_weights or fp8_kv) and sm < rules.fp8_min_sm:
        reasons.append(f"{phase}: FP8 {'weights' if fp8_weights else 'KV cache'} needs SM >= "
                       f"{rules.fp8_min_sm}; {gpu.key} is SM {sm}")
    max_input, max_seq = int(s["max_input_len"]), int(s["max_seq_len"])
    if max_input > max_seq:
        reasons.append(f"{phase}: max_input_len {max_input} > max_seq_len {max_seq} "
                       f"({s.values['max_input_len'].describe()}; "
                       f"{s.values['max_seq_len'].describe()})")
    if max_seq > model.max_seq_len:
        reasons.append(f"{phase}: max_seq_len {max_seq} > {model.name}'s "
                       f"max_position_embeddings x rope factor = {model.max_seq_len}; "
                       "TensorRT-LLM warns the model's accuracy might be affected")
    if _on(s["multiple_profiles"]) and s["opt_num_tokens"] is not None:
        reasons.append(f"{phase}: multiple_profiles is enabled while opt_num_tokens is set "
                       f"({s['opt_num_tokens']}); trtllm-build refuses the pair")

    # _common.check_max_num_tokens (remove_input_padding is always on in pdtrt's engines).
    batch, tokens, tpb = int(s["max_batch_size"]), int(s["max_num_tokens"]), int(
        s["tokens_per_block"])
    if tokens > max_seq * batch:
        s = s.with_value("max_num_tokens", max_seq * batch,
                         f"clamped like TensorRT-LLM: {s.values['max_num_tokens'].describe()} "
                         f"= {tokens} > max_seq_len x max_batch_size = {max_seq} x {batch}")
        notes.append(f"{phase}: max_num_tokens {tokens} clamped to max_seq_len x "
                     f"max_batch_size = {max_seq * batch}")
        tokens = max_seq * batch
    if _on(s["context_fmha"]) and tokens < tpb:
        reasons.append(f"{phase}: max_num_tokens {tokens} < tokens_per_block {tpb}: "
                       "TensorRT-LLM would raise it to tokens_per_block and require chunked "
                       "context; set max_num_tokens >= tokens_per_block")
    if tokens > rules.max_num_tokens_warn_above:
        notes.append(f"{phase}: max_num_tokens {tokens} > {rules.max_num_tokens_warn_above}: "
                     "TensorRT-LLM warns it is usually not faster and may exceed the TensorRT "
                     "tensor volume")

    # builder.build: FP8 / paged context FMHA logic.
    if not fp8_weights:
        if s["gemm_plugin"] == "disable" and weights is WeightQuant.NONE:
            notes.append(f"{phase}: gemm_plugin disabled for {model.name}'s BF16/FP16 GEMMs")
        if _on(s["use_fp8_context_fmha"]):
            s = s.with_value("use_fp8_context_fmha", "disable",
                             "acts only with FP8 weights; TensorRT-LLM disables it otherwise")
        if fp8_kv and _on(s["use_paged_context_fmha"]):
            s = s.with_value("use_paged_context_fmha", "disable",
                             "FP8 KV cache without FP8 weights: TensorRT-LLM disables paged "
                             "context FMHA (no FP8 context FMHA)")
            notes.append(f"{phase}: paged context FMHA is off (FP8 KV cache, weights "
                         f"{weights}): no chunked prefill and no KV reuse; FP8 weights keep "
                         "it on")
    else:
        if s["gemm_plugin"] != "disable":
            s = s.with_value("gemm_plugin", "disable", "FP8 weights: the FP8 gemm plugin only "
                             "helps batches <= 4, TensorRT's FP8 GEMMs are used instead")
        if sm < rules.fp8_min_sm and _on(s["use_fp8_context_fmha"]):
            s = s.with_value("use_fp8_context_fmha", "disable",
                             f"FP8 context FMHA needs SM >= {rules.fp8_min_sm}")
    if kv_dtype is KVDType.INT8 and _on(s["use_paged_context_fmha"]):
        s = s.with_value("use_paged_context_fmha", "disable",
                         "INT8 KV cache: TensorRT-LLM disables paged context FMHA")
        notes.append(f"{phase}: paged context FMHA is off (INT8 KV cache)")
    if (phase is Phase.PREFILL and not _on(s["use_paged_context_fmha"])
            and int(s["max_num_tokens"]) < max_input):
        reasons.append(f"{phase}: max_num_tokens {s['max_num_tokens']} < max_input_len "
                       f"{max_input} while paged context FMHA is off: a prompt would need "
                       "chunked prefill, which needs paged context FMHA; raise max_num_tokens")
    if reasons:
        raise BuildRejected(reasons, hint="change the pool's engine settings in the spec (or "
                            "the engine profile) and run the dry run again")
    return RuleOutcome(settings=s, notes=tuple(notes))
