"""Engine manifests (``pdtrt-engine.json``): what a build wrote, and whether two engines fit.

Every engine directory pdtrt builds carries a manifest: which phase and target it is for, the
model, the GPU (name and compute capability) it was built on, the TensorRT / TensorRT-LLM / CUDA
versions, the build settings, the hashes of its inputs, and the **KV layout** -- the facts two
engines must share to hand a request's KV cache from prefill to decode. TensorRT-LLM's own
engine ``config.json`` records none of the GPU or version facts, hence this sidecar.

Compatibility: prefill and decode must agree on KV dtype, tokens per block, head size, layer
count and (uniform) KV-head count, and on the TensorRT-LLM version; TP/PP and weight precision
may differ. The KV layout type and the manifest's file name live in :mod:`pdtrt.engine_dir`,
which the engine models read without loading this module's pydantic.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdtrt.engine_dir import MANIFEST_NAME, KVLayout
from pdtrt.enums import Phase, Target, WeightQuant
from pdtrt.errors import PdtrtError
from pdtrt.yamlio import write_atomic

__all__ = [
    "DEFAULT_ENGINES_ROOT",
    "MANIFEST_NAME",
    "EngineLayout",
    "EngineManifest",
    "KVLayout",
    "compatibility_problems",
    "read_manifest",
    "write_manifest",
]

# The step stamp ``pdtrt build`` leaves in each output directory (resume by input hash).
STAMP_NAME = ".pdtrt-step.json"
DEFAULT_ENGINES_ROOT = Path("engines")
MANIFEST_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineManifest(_Frozen):
    manifest_version: int = MANIFEST_VERSION
    phase: Phase | None  # None: an aggregated engine doing both phases
    target: Target
    model: str
    gpu_name: str | None  # as NVML reports it; None for the CPU reference engine
    compute_capability: str | None
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    weights: WeightQuant
    kv_layout: KVLayout
    versions: dict[str, str | None]  # e.g. {"tensorrt_llm": "0.21.0", "tensorrt": ..., "cuda": ...}
    build_settings: dict[str, object]
    input_hashes: dict[str, str]
    pdtrt_version: str


def write_manifest(engine_dir: Path, manifest: EngineManifest) -> Path:
    """Write ``engine_dir/pdtrt-engine.json`` atomically (sorted keys: deterministic bytes)."""
    path = engine_dir / MANIFEST_NAME
    write_atomic(path, json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True)
                 + "\n")
    return path


def read_manifest(engine_dir: Path) -> EngineManifest:
    """Read ``engine_dir/pdtrt-engine.json``; raises :class:`PdtrtError` naming the file."""
    path = engine_dir / MANIFEST_NAME
    try:
        return EngineManifest.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PdtrtError(f"{engine_dir} has no {MANIFEST_NAME}",
                         hint="build the engine with `pdtrt build SPEC`") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        raise PdtrtError(f"{path}: invalid manifest at {where}: {first['msg']}",
                         hint="rebuild the engine with this pdtrt version") from None


def compatibility_problems(prefill: EngineManifest, decode: EngineManifest) -> list[str]:
    """Why the KV cache of ``prefill`` cannot be handed to ``decode`` (empty list: it can)."""
    problems = []
    p, d = prefill.kv_layout, decode.kv_layout
    for field in ("kv_dtype", "tokens_per_block", "head_dim", "num_layers", "num_kv_heads"):
        pv, dv = getattr(p, field), getattr(d, field)
        if pv != dv:
            problems.append(f"KV layout differs: {field} prefill {pv} != decode {dv}")
    if prefill.target != decode.target:
        problems.append(f"targets differ: prefill {prefill.target} != decode {decode.target}")
    pv = prefill.versions.get("tensorrt_llm")
    dv = decode.versions.get("tensorrt_llm")
    if pv != dv:
        problems.append(f"TensorRT-LLM versions differ: prefill {pv} != decode {dv}")
    if prefill.model != decode.model:
        problems.append(f"models differ: prefill {prefill.model} != decode {decode.model}")
    return problems


class EngineLayout:
    """Where the engines of one deployment live: ``ROOT/<deployment>/<phase>/`` (engine files
    or, on the reference target, the HF checkpoint, plus ``pdtrt-engine.json``) and
    ``ROOT/<deployment>/tokenizer/`` (the reference target's tokenizer). ``ROOT`` defaults to
    ``engines/`` under the current directory (``--engines-dir`` on the commands)."""

    def __init__(self, root: Path, deployment: str) -> None:
        self.root = root
        self.deployment = deployment

    @property
    def deployment_dir(self) -> Path:
        return self.root / self.deployment

    def phase_dir(self, phase: Phase) -> Path:
        return self.deployment_dir / str(phase)

    @property
    def aggregated_dir(self) -> Path:
        """Options of the aggregated baseline, where a target writes its own (trtllm-1.2):
        it serves the prefill phase's engine, so its manifest is prefill's."""
        return self.deployment_dir / "aggregated"

    @property
    def tokenizer_dir(self) -> Path:
        return self.deployment_dir / "tokenizer"
