"""The engine limits a generated repository states, resolved once per phase.

A pool's ``engine`` section may leave ``max_batch_size``, ``max_num_tokens``, ``max_input_len``
and ``max_seq_len`` out. The repository needs numbers, so each is taken from, in order:

1. the spec;
2. the engine manifest's build settings (``pdtrt-engine.json`` of the phase's engine directory,
   when it exists: the engine was built with those limits, so the server must use them);
3. a deterministic fallback: ``max_input_len`` = ``workload.isl``; ``max_seq_len`` =
   ``max_input_len + workload.osl``; ``max_num_tokens`` = the target's default
   (:class:`EngineDefaults`; 8192 on every target so far, trtllm-build's); ``max_batch_size`` =
   the sequences of ``max_seq_len`` tokens whose KV fits the pool's GPU (pdtrt's memory
   estimate), at most the target's default (2048 so far, trtllm-build's).

``tokens_per_block`` always comes from the spec (it has a default there).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.manifest import MANIFEST_NAME, EngineManifest, read_manifest
from pdtrt.enums import Phase

__all__ = ["TRTLLM_BUILD_DEFAULTS", "EngineDefaults", "LimitSource", "PhaseLimits",
           "manifest_if_present", "resolve_limits"]


@dataclass(frozen=True, kw_only=True)
class EngineDefaults:
    """A target's engine limits when neither the spec nor a manifest states them."""

    max_num_tokens: int  # batched input tokens per engine step
    max_batch_size: int  # the cap of the batch size computed from the KV capacity


# trtllm-build's defaults of --max_num_tokens and --max_batch_size
TRTLLM_BUILD_DEFAULTS = EngineDefaults(max_num_tokens=8192, max_batch_size=2048)


class LimitSource(StrEnum):
    SPEC = "spec"
    MANIFEST = "manifest"
    FALLBACK = "fallback"


@dataclass(frozen=True, kw_only=True)
class PhaseLimits:
    max_batch_size: int
    max_num_tokens: int
    max_input_len: int
    max_seq_len: int
    tokens_per_block: int
    kv_tokens: int  # pdtrt's estimate of one instance's KV-cache capacity, tokens
    sources: dict[str, LimitSource]

    def to_dict(self) -> dict[str, object]:
        return {
            "max_batch_size": self.max_batch_size, "max_num_tokens": self.max_num_tokens,
            "max_input_len": self.max_input_len, "max_seq_len": self.max_seq_len,
            "tokens_per_block": self.tokens_per_block, "kv_tokens": self.kv_tokens,
            "sources": {k: str(v) for k, v in sorted(self.sources.items())},
        }


def manifest_if_present(engine_dir: Path) -> EngineManifest | None:
    """The engine's manifest when ``engine_dir`` has one (raises on an unreadable one)."""
    return read_manifest(engine_dir) if (engine_dir / MANIFEST_NAME).is_file() else None


def _built(manifest: EngineManifest | None, name: str) -> int | None:
    """A build setting of the manifest: ``{"settings": {name: {"value": v}}}`` or flat."""
    if manifest is None:
        return None
    settings = manifest.build_settings
    nested = settings.get("settings")
    value = nested.get(name) if isinstance(nested, dict) else settings.get(name)
    if isinstance(value, dict):
        value = value.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def resolve_limits(dep: Deployment, phase: Phase, manifest: EngineManifest | None, *,
                   defaults: EngineDefaults) -> PhaseLimits:
    """The limits of ``phase``'s engine (see the module docstring for the order)."""
    eng = dep.spec.pool(phase).engine
    sources: dict[str, LimitSource] = {}

    def pick(name: str, fallback: int) -> int:
        for source, value in ((LimitSource.SPEC, getattr(eng, name)),
                              (LimitSource.MANIFEST, _built(manifest, name))):
            if value is not None:
                sources[name] = source
                return value
        sources[name] = LimitSource.FALLBACK
        return fallback

    max_input_len = pick("max_input_len", dep.spec.workload.isl)
    max_seq_len = pick("max_seq_len", max_input_len + dep.spec.workload.osl)
    max_num_tokens = pick("max_num_tokens", defaults.max_num_tokens)
    mem = dep.fits[phase]
    seqs_that_fit = mem.kv_blocks // max(-(-max_seq_len // mem.tokens_per_block), 1)
    max_batch_size = pick("max_batch_size", min(max(seqs_that_fit, 1), defaults.max_batch_size))
    return PhaseLimits(
        max_batch_size=max_batch_size, max_num_tokens=max_num_tokens,
        max_input_len=max_input_len, max_seq_len=max_seq_len,
        tokens_per_block=eng.tokens_per_block, kv_tokens=mem.kv_tokens, sources=sources,
    )
