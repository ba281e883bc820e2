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

from dataclasses import dataclass, field

from pdtrt.blueprint.settings import EngineSettings
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


@dataclass(kw_only=True)
class _Check:
    """One phase under the rules: its facts, its settings as adjusted so far, what was said."""

    s: EngineSettings
    model: ModelFacts
    gpu: GPU
    weights: WeightQuant
    kv_dtype: KVDType
    rules: TargetRules
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def phase(self) -> Phase:
        return self.s.phase

    @property
    def sm(self) -> int:
        return self.gpu.sm_version or 0

    @property
    def fp8_weights(self) -> bool:
        return self.weights is WeightQuant.FP8

    def adjust(self, name: str, value: int | str, why: str) -> None:
        self.s = self.s.with_value(name, value, why)


def _on(value: object) -> bool:
    return value is True or value == "enable"


def apply_rules(settings: EngineSettings, *, model: ModelFacts, gpu: GPU, weights: WeightQuant,
                kv_dtype: KVDType, rules: TargetRules) -> RuleOutcome:
    """The settings as TensorRT-LLM will build them, with a note per adjustment.

    Raises :class:`BuildRejected` with every violated rule.
    """
    check = _Check(s=settings, model=model, gpu=gpu, weights=weights, kv_dtype=kv_dtype,
                   rules=rules)
    _reject_unbuildable(check)
    _token_budget(check)
    _attention_and_gemm(check)
    _prompt_fits_one_step(check)
    if check.reasons:
        raise BuildRejected(check.reasons, hint="change the pool's engine settings in the spec "
                            "(or the engine profile) and run the dry run again")
    return RuleOutcome(settings=check.s, notes=tuple(check.notes))


def _reject_unbuildable(c: _Check) -> None:
    """Combinations trtllm-build refuses, or that disaggregated serving cannot use."""
    s, phase, rules = c.s, c.phase, c.rules
    if s["max_beam_width"] != rules.max_beam_width:
        c.reasons.append(f"{phase}: max_beam_width {s['max_beam_width']}: disaggregated serving "
                         f"needs {rules.max_beam_width}")
    if (c.fp8_weights or c.kv_dtype is KVDType.FP8) and c.sm < rules.fp8_min_sm:
        c.reasons.append(f"{phase}: FP8 {'weights' if c.fp8_weights else 'KV cache'} needs SM "
                         f">= {rules.fp8_min_sm}; {c.gpu.key} is SM {c.sm}")
    max_input, max_seq = int(s["max_input_len"]), int(s["max_seq_len"])
    if max_input > max_seq:
        c.reasons.append(f"{phase}: max_input_len {max_input} > max_seq_len {max_seq} "
                         f"({s.values['max_input_len'].describe()}; "
                         f"{s.values['max_seq_len'].describe()})")
    if max_seq > c.model.max_seq_len:
        c.reasons.append(f"{phase}: max_seq_len {max_seq} > {c.model.name}'s "
                         f"max_position_embeddings x rope factor = {c.model.max_seq_len}; "
                         "TensorRT-LLM warns the model's accuracy might be affected")
    if _on(s["multiple_profiles"]) and s["opt_num_tokens"] is not None:
        c.reasons.append(f"{phase}: multiple_profiles is enabled while opt_num_tokens is set "
                         f"({s['opt_num_tokens']}); trtllm-build refuses the pair")


def _token_budget(c: _Check) -> None:
    """``_common.check_max_num_tokens`` (remove_input_padding is always on in pdtrt's engines)."""
    s, phase = c.s, c.phase
    max_seq, batch = int(s["max_seq_len"]), int(s["max_batch_size"])
    tokens, tpb = int(s["max_num_tokens"]), int(s["tokens_per_block"])
    if tokens > max_seq * batch:
        c.adjust("max_num_tokens", max_seq * batch,
                 f"clamped like TensorRT-LLM: {s.values['max_num_tokens'].describe()} "
                 f"= {tokens} > max_seq_len x max_batch_size = {max_seq} x {batch}")
        c.notes.append(f"{phase}: max_num_tokens {tokens} clamped to max_seq_len x "
                       f"max_batch_size = {max_seq * batch}")
        tokens = max_seq * batch
    if _on(s["context_fmha"]) and tokens < tpb:
        c.reasons.append(f"{phase}: max_num_tokens {tokens} < tokens_per_block {tpb}: "
                         "TensorRT-LLM would raise it to tokens_per_block and require chunked "
                         "context; set max_num_tokens >= tokens_per_block")
    if tokens > c.rules.max_num_tokens_warn_above:
        c.notes.append(f"{phase}: max_num_tokens {tokens} > {c.rules.max_num_tokens_warn_above}"
                       ": TensorRT-LLM warns it is usually not faster and may exceed the "
                       "TensorRT tensor volume")


def _attention_and_gemm(c: _Check) -> None:
    """``builder.build``: the FP8 / paged context FMHA logic, and the gemm plugin."""
    phase, weights = c.phase, c.weights
    if not c.fp8_weights:
        if c.s["gemm_plugin"] == "disable" and weights is WeightQuant.NONE:
            c.notes.append(f"{phase}: gemm_plugin disabled for {c.model.name}'s BF16/FP16 GEMMs")
        if _on(c.s["use_fp8_context_fmha"]):
            c.adjust("use_fp8_context_fmha", "disable",
                     "acts only with FP8 weights; TensorRT-LLM disables it otherwise")
        if c.kv_dtype is KVDType.FP8 and _on(c.s["use_paged_context_fmha"]):
            c.adjust("use_paged_context_fmha", "disable",
                     "FP8 KV cache without FP8 weights: TensorRT-LLM disables paged "
                     "context FMHA (no FP8 context FMHA)")
            c.notes.append(f"{phase}: paged context FMHA is off (FP8 KV cache, weights "
                           f"{weights}): no chunked prefill and no KV reuse; FP8 weights keep "
                           "it on")
    else:
        if c.s["gemm_plugin"] != "disable":
            c.adjust("gemm_plugin", "disable", "FP8 weights: the FP8 gemm plugin only helps "
                     "batches <= 4, TensorRT's FP8 GEMMs are used instead")
        if c.sm < c.rules.fp8_min_sm and _on(c.s["use_fp8_context_fmha"]):
            c.adjust("use_fp8_context_fmha", "disable",
                     f"FP8 context FMHA needs SM >= {c.rules.fp8_min_sm}")
    if c.kv_dtype is KVDType.INT8 and _on(c.s["use_paged_context_fmha"]):
        c.adjust("use_paged_context_fmha", "disable",
                 "INT8 KV cache: TensorRT-LLM disables paged context FMHA")
        c.notes.append(f"{phase}: paged context FMHA is off (INT8 KV cache)")


def _prompt_fits_one_step(c: _Check) -> None:
    """Without paged context FMHA there is no chunked prefill: a prompt is one step."""
    max_input, tokens = int(c.s["max_input_len"]), int(c.s["max_num_tokens"])
    if c.phase is Phase.PREFILL and not _on(c.s["use_paged_context_fmha"]) and tokens < max_input:
        c.reasons.append(f"{c.phase}: max_num_tokens {tokens} < max_input_len {max_input} while "
                         "paged context FMHA is off: a prompt would need chunked prefill, which "
                         "needs paged context FMHA; raise max_num_tokens")
