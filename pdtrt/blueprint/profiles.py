"""Engine profiles: per-GPU, per-phase presets of TensorRT-LLM build settings, as data.

A profile (``pdtrt/data/profiles/<name>.yaml``, shown as ``engines/profiles/``) says how an
engine for one phase on one GPU type should be built: token budget per step, batch size (a
number, or ``computed`` from the KV capacity), plugin and feature switches. It is the *default*
layer: the spec's ``<pool>.engine`` values override it, and values that depend on the model or
the workload are computed by :mod:`pdtrt.blueprint.settings`. A profile is not a spec and holds no
model facts.

Selection: the first profile whose ``phase`` matches and whose ``gpus`` list names the pool's
catalog key; otherwise the generic ``default-<phase>`` profile.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdtrt.enums import Phase
from pdtrt.errors import BuildError

__all__ = ["COMPUTED", "EngineProfile", "ProfileSettings", "load_profiles", "select_profile"]

COMPUTED = "computed"
Computed = Literal["computed"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProfileSettings(_Frozen):
    """Build settings of one profile. ``computed`` values are derived from model + workload."""

    max_batch_size: int | Computed = Field(description="requests per engine step")
    max_batch_size_cap: int = Field(default=2048, ge=1,
                                    description="upper bound of a computed max_batch_size")
    max_num_tokens: int | Computed = Field(description="batched input tokens per step")
    max_input_len: int | Computed = COMPUTED
    max_seq_len: int | Computed = COMPUTED
    tokens_per_block: int = Field(default=32, ge=1)
    gemm_plugin: Literal["auto", "disable"] = "auto"
    context_fmha: bool = True
    use_paged_context_fmha: bool = True
    use_fp8_context_fmha: bool = True
    multiple_profiles: bool = True
    use_fused_mlp: bool = True
    reduce_fusion: bool = False
    opt_num_tokens: int | None = None


class EngineProfile(_Frozen):
    name: str
    phase: Phase
    gpus: tuple[str, ...] = Field(description="catalog keys; empty: any GPU (generic)")
    description: str
    sources: tuple[str, ...] = ()
    settings: ProfileSettings


def _builtin_dir() -> Path:
    return Path(str(resources.files("pdtrt").joinpath("data/profiles")))


def _parse(path: Path) -> EngineProfile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        profile = EngineProfile.model_validate(data)
    except (OSError, yaml.YAMLError) as exc:
        raise BuildError(f"cannot read engine profile {path}: {exc}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BuildError(f"invalid engine profile {path}: {where}: {first['msg']}",
                         hint="see engines/profiles/README.md for the fields") from None
    if profile.name != path.stem:
        raise BuildError(f"engine profile {path} is named '{profile.name}'",
                         hint=f"a profile's name must equal its file name: {path.stem}")
    return profile


@cache
def _load_dir(directory: Path) -> tuple[EngineProfile, ...]:
    return tuple(_parse(p) for p in sorted(directory.glob("*.yaml")))


def load_profiles(directory: Path | None = None) -> tuple[EngineProfile, ...]:
    """Every profile in ``directory`` (default: the built-in ones), sorted by name."""
    return _load_dir((directory or _builtin_dir()).resolve())


def select_profile(profiles: tuple[EngineProfile, ...], gpu_key: str,
                   phase: Phase) -> EngineProfile:
    """The profile for ``phase`` on ``gpu_key``; the generic one when none names the GPU."""
    for profile in profiles:
        if profile.phase is phase and gpu_key in profile.gpus:
            return profile
    for profile in profiles:
        if profile.phase is phase and not profile.gpus:
            return profile
    raise BuildError(f"no engine profile for {phase} on {gpu_key}",
                     hint=f"add engines/profiles/default-{phase}.yaml (a profile with gpus: [])")
