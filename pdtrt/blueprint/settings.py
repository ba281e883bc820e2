"""The build settings of one phase's engine, each with how it was chosen.

Three layers, highest first: the spec (``<pool>.engine.*`` keys the user wrote), the engine
profile (:mod:`pdtrt.blueprint.profiles`), and values computed from the model facts and the
workload -- e.g. the decode ``max_batch_size`` from the KV capacity at ISL + OSL. Every
:class:`Setting` records its source (``spec``, ``profile``, ``computed``) and why, so the plan can
say "max_batch_size 56 (computed: 7123 KV blocks / 110 blocks per 3500-token sequence)".

TensorRT-LLM's own adjustments (clamps, features it switches off) are applied afterwards by
:mod:`pdtrt.targets.trtllm_rules`; this module only chooses.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.profiles import COMPUTED, EngineProfile
from pdtrt.enums import Phase
from pdtrt.errors import InfeasibleError
from pdtrt.facts.memory import fit

__all__ = ["SWITCHES", "EngineSettings", "Setting", "SettingSource", "resolve_settings"]

# Engine limits the spec may set (``<pool>.engine.<name>``), in the order they are shown.
LIMITS = ("max_batch_size", "max_num_tokens", "max_input_len", "max_seq_len", "tokens_per_block")
SWITCHES = ("gemm_plugin", "context_fmha", "use_paged_context_fmha", "use_fp8_context_fmha",
            "multiple_profiles", "use_fused_mlp", "reduce_fusion", "opt_num_tokens")


class SettingSource(StrEnum):
    SPEC = "spec"
    PROFILE = "profile"
    COMPUTED = "computed"


@dataclass(frozen=True, kw_only=True)
class Setting:
    value: int | str | bool | None
    source: SettingSource
    why: str  # the spec key, the profile name, or the arithmetic

    def describe(self) -> str:
        return f"{self.source}: {self.why}"

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "source": str(self.source), "why": self.why}


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    phase: Phase
    profile: str
    values: dict[str, Setting]

    def __getitem__(self, name: str) -> int | str | bool | None:
        return self.values[name].value

    def with_value(self, name: str, value: int | str | bool | None, why: str) -> EngineSettings:
        """A copy where ``name`` is ``value``, computed for the reason ``why``."""
        values = dict(self.values)
        values[name] = Setting(value=value, source=SettingSource.COMPUTED, why=why)
        return replace(self, values=values)

    def to_dict(self) -> dict[str, object]:
        return {name: s.to_dict() for name, s in self.values.items()}


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _batch_from_kv_capacity(dep: Deployment, phase: Phase, *, seq_len: int,
                            max_num_tokens: int, tokens_per_block: int, cap: int) -> Setting:
    spec = dep.spec
    pool = spec.pool(phase)
    mem = fit(dep.model, dep.gpus[phase], tp=pool.tp, pp=pool.pp, seq_len=seq_len,
              dtype=spec.model.dtype, weights=spec.weights(phase),
              kv_dtype=spec.kv_cache_dtype(phase), max_num_tokens=max_num_tokens,
              tokens_per_block=tokens_per_block,
              kv_cache_fraction=pool.engine.kv_cache_free_gpu_mem_fraction)
    buffer = spec.kv_transfer.buffer_size_bytes
    budget = max(int((mem.free_bytes - buffer) * mem.kv_cache_fraction), 0)
    blocks = budget // (mem.kv_bytes_per_token * tokens_per_block)
    seqs = blocks // mem.blocks_per_seq
    if seqs < 1:
        raise InfeasibleError(
            f"{phase}: no {seq_len}-token sequence fits the KV cache of {mem.gpu} after the "
            f"{buffer} B KV-transfer buffer: {mem.explain()}",
            hint="use fp8 KV, a larger TP, a smaller kv_transfer.buffer_size_bytes, or shorter "
            "sequences")
    why = (f"KV capacity: ({mem.free_bytes} B free - {buffer} B transfer buffer) x "
           f"{mem.kv_cache_fraction} = {blocks} blocks of {tokens_per_block} tokens x "
           f"{mem.kv_bytes_per_token} B; / {mem.blocks_per_seq} blocks per {seq_len}-token "
           f"sequence = {seqs} sequences")
    if seqs > cap:
        why += f", capped at the profile's {cap}"
    return Setting(value=min(seqs, cap), source=SettingSource.COMPUTED, why=why)


def resolve_settings(dep: Deployment, phase: Phase, profile: EngineProfile, *,
                     switches: tuple[str, ...] = SWITCHES) -> EngineSettings:
    """Choose every build setting of ``phase``: spec > profile > computed.

    ``switches``: the profile's plugin/feature switches the target's builds take (the
    target's ``build_switches``; none on the reference target), in the order shown.

    Raises :class:`InfeasibleError` when a computed batch size would be 0.
    """
    spec = dep.spec
    eng = spec.pool(phase).engine
    prof = profile.settings
    wl = spec.workload
    values: dict[str, Setting] = {}

    def pick(name: str, computed) -> Setting:
        if name in eng.model_fields_set and getattr(eng, name) is not None:
            return Setting(value=getattr(eng, name), source=SettingSource.SPEC,
                           why=f"{phase}.engine.{name}")
        value = getattr(prof, name)
        if value != COMPUTED:
            return Setting(value=value, source=SettingSource.PROFILE, why=profile.name)
        return computed()

    values["tokens_per_block"] = pick("tokens_per_block", lambda: None)
    tpb = int(values["tokens_per_block"].value)
    values["max_input_len"] = pick("max_input_len", lambda: Setting(
        value=wl.isl, source=SettingSource.COMPUTED, why="workload.isl"))
    values["max_seq_len"] = pick("max_seq_len", lambda: Setting(
        value=max(wl.seq_len, int(values["max_input_len"].value) + 1),
        source=SettingSource.COMPUTED,
        why=f"workload.isl + workload.osl = {wl.isl} + {wl.osl}"))
    seq_len = int(values["max_seq_len"].value)
    # The activation reserve of the capacity computation needs a token budget: the spec's or
    # the profile's when fixed, else the largest the computed one can become (conservative).
    if "max_num_tokens" in eng.model_fields_set and eng.max_num_tokens is not None:
        budget = eng.max_num_tokens
    elif prof.max_num_tokens != COMPUTED:
        budget = int(prof.max_num_tokens)
    else:
        budget = _round_up(prof.max_batch_size_cap, tpb)
    values["max_batch_size"] = pick("max_batch_size", lambda: _batch_from_kv_capacity(
        dep, phase, seq_len=seq_len, tokens_per_block=tpb, cap=prof.max_batch_size_cap,
        max_num_tokens=budget))
    batch = int(values["max_batch_size"].value)
    values["max_num_tokens"] = pick("max_num_tokens", lambda: _computed_tokens(
        phase, batch=batch, max_input_len=int(values["max_input_len"].value), tpb=tpb))
    values["max_beam_width"] = Setting(value=1, source=SettingSource.COMPUTED,
                                       why="disaggregated serving needs beam width 1")
    for name in switches:
        value = getattr(prof, name)
        if isinstance(value, bool):  # TensorRT-LLM's own spelling, as in the argv
            value = "enable" if value else "disable"
        values[name] = Setting(value=value, source=SettingSource.PROFILE, why=profile.name)
    ordered = {name: values[name] for name in (*LIMITS[:4], "max_beam_width", LIMITS[4],
                                               *switches)}
    return EngineSettings(phase=phase, profile=profile.name, values=ordered)


def _computed_tokens(phase: Phase, *, batch: int, max_input_len: int, tpb: int) -> Setting:
    if phase is Phase.DECODE:
        value = max(tpb, _round_up(batch, tpb))
        why = (f"one token per request: max_batch_size {batch} rounded up to a multiple of "
               f"tokens_per_block {tpb}")
    else:
        value = _round_up(max_input_len, tpb)
        why = f"one whole prompt per step: max_input_len {max_input_len} rounded up to {tpb}"
    return Setting(value=value, source=SettingSource.COMPUTED, why=why)
