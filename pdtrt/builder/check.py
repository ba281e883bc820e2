"""``pdtrt engines check``: can these engines serve together, and here?

Engines are found from specs (``engines/<name>/{prefill,decode}/``), deployment directories
(holding ``prefill/`` and ``decode/``) or engine directories (holding ``pdtrt-engine.json``).
Checks, each problem a line naming the engine:

- prefill vs decode manifests: :func:`pdtrt.blueprint.manifest.compatibility_problems` (KV dtype,
  tokens per block, head size, layers, KV heads, target, TensorRT-LLM version, model);
- each manifest vs the engine's own ``config.json`` when present (TensorRT-LLM's engine config,
  or the reference target's HF config): layers, KV heads, head size, tokens per block, KV
  quantisation, TensorRT-LLM version;
- against a spec: the manifest's compute capability vs the pool's GPU;
- this machine: whether a local GPU (NVML) has each engine's compute capability -- a note,
  or with ``here`` a problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdtrt.blueprint.manifest import (
    DEFAULT_ENGINES_ROOT,
    MANIFEST_NAME,
    EngineLayout,
    EngineManifest,
    compatibility_problems,
    read_manifest,
)
from pdtrt.enums import KVDType, Phase
from pdtrt.errors import PdtrtError
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.gpu_detect import detect_gpus
from pdtrt.spec.load import load_deployment

__all__ = ["CheckReport", "EngineEntry", "check_engines"]


@dataclass(frozen=True, kw_only=True)
class EngineEntry:
    path: Path
    manifest: EngineManifest
    expected_cc: str | None = None  # from a spec's pool GPU


@dataclass(kw_only=True)
class CheckReport:
    engines: list[EngineEntry] = field(default_factory=list)
    pairs: list[tuple[Path, Path]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "engines": [{"path": str(e.path), "phase": None if e.manifest.phase is None
                         else str(e.manifest.phase), "target": str(e.manifest.target),
                         "gpu_name": e.manifest.gpu_name,
                         "compute_capability": e.manifest.compute_capability,
                         "kv_fingerprint": e.manifest.kv_layout.fingerprint()}
                        for e in self.engines],
            "pairs": [[str(p), str(d)] for p, d in self.pairs],
            "problems": self.problems, "info": self.info,
        }


def _from_spec(path: Path, engines_root: Path) -> list[EngineEntry]:
    dep = load_deployment(path)
    layout = EngineLayout(engines_root, dep.spec.name)
    return [EngineEntry(path=layout.phase_dir(p), manifest=read_manifest(layout.phase_dir(p)),
                        expected_cc=dep.gpus[p].compute_capability) for p in Phase]


def _collect(target: Path, engines_root: Path) -> list[EngineEntry]:
    if target.is_file():
        return _from_spec(target, engines_root)
    if (target / MANIFEST_NAME).is_file():
        return [EngineEntry(path=target, manifest=read_manifest(target))]
    subdirs = [target / str(p) for p in Phase if (target / str(p) / MANIFEST_NAME).is_file()]
    if subdirs:
        return [EngineEntry(path=d, manifest=read_manifest(d)) for d in subdirs]
    raise PdtrtError(f"{target}: not a spec, an engine directory ({MANIFEST_NAME}) or a "
                     "deployment directory (prefill/, decode/)",
                     hint="give a pdtrt.yaml, engines/<deployment>/ or engines/<d>/<phase>/")


def _config_problems(entry: EngineEntry) -> list[str]:
    file = entry.path / "config.json"
    if not file.is_file():
        return []
    try:
        config: dict[str, Any] = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [f"{file}: unreadable engine config: {exc}"]
    m, kv = entry.manifest, entry.manifest.kv_layout
    problems = []
    if "pretrained_config" in config:  # TensorRT-LLM's engine config.json
        pre, build = config["pretrained_config"], config.get("build_config", {})
        quant = pre.get("quantization") or {}
        facts = {
            "num_layers": pre.get("num_hidden_layers"),
            "num_kv_heads": pre.get("num_key_value_heads"),
            "head_dim": pre.get("head_size"),
            "tokens_per_block": (build.get("plugin_config") or {}).get("tokens_per_block"),
        }
        kv_algo = quant.get("kv_cache_quant_algo")
        engine_fp8 = kv_algo == "FP8"
        if engine_fp8 != (kv.kv_dtype is KVDType.FP8):
            problems.append(f"{file}: kv_cache_quant_algo {kv_algo} but the manifest says KV "
                            f"{kv.kv_dtype}")
        version = config.get("version")
        if version != m.versions.get("tensorrt_llm"):
            problems.append(f"{file}: built by TensorRT-LLM {version}, the manifest says "
                            f"{m.versions.get('tensorrt_llm')}")
    else:  # an HF config.json (reference target)
        heads = config.get("num_attention_heads")
        facts = {"num_layers": config.get("num_hidden_layers"),
                 "num_kv_heads": config.get("num_key_value_heads") or heads,
                 "head_dim": config.get("head_dim") or (
                     config["hidden_size"] // heads if heads and "hidden_size" in config
                     else None)}
    for name, value in facts.items():
        if value is not None and value != getattr(kv, name):
            problems.append(f"{file}: {name} {value} but the manifest says "
                            f"{getattr(kv, name)}")
    return problems


def _check_here(report: CheckReport, *, here: bool, nvml: Any) -> None:
    """Whether each GPU engine loads on this machine: a note, or a problem under ``here``."""
    gpu_engines = [e for e in report.engines if e.manifest.compute_capability is not None]
    if not gpu_engines:
        return
    detection = detect_gpus(load_catalog(), nvml)
    seen = ", ".join(f"{g.name} (compute {g.compute_capability})"
                     for g in detection.gpus) or detection.problem or "no GPU"
    for e in gpu_engines:
        cc = e.manifest.compute_capability
        local = next((g for g in detection.gpus if g.compute_capability == cc), None)
        if local is not None:
            report.info.append(f"{e.path}: loads on this machine's {local.name}")
        elif here:
            report.problems.append(f"{e.path}: needs a GPU of compute {cc} "
                                   f"({e.manifest.gpu_name}); this machine has: {seen}")
        else:
            report.info.append(f"{e.path}: cannot load on this machine (needs compute {cc}; "
                               f"this machine has: {seen}); --here makes this an error")


def check_engines(targets: list[Path], *, engines_root: Path = DEFAULT_ENGINES_ROOT,
                  here: bool = False, nvml: Any = None) -> CheckReport:
    """Check the engines of ``targets``; problems are collected, never raised."""
    report = CheckReport()
    for target in targets:
        report.engines += _collect(target, engines_root)
    prefills = [e for e in report.engines if e.manifest.phase is Phase.PREFILL]
    decodes = [e for e in report.engines if e.manifest.phase is Phase.DECODE]
    if not prefills or not decodes:
        report.info.append("no prefill/decode pair to compare")
    for p in prefills:
        for d in decodes:
            report.pairs.append((p.path, d.path))
            report.problems += [f"{p.path} + {d.path}: {x}"
                                for x in compatibility_problems(p.manifest, d.manifest)]
    for e in report.engines:
        report.problems += _config_problems(e)
        cc = e.manifest.compute_capability
        if e.expected_cc and cc and e.expected_cc != cc:
            report.problems.append(f"{e.path}: built for compute {cc}, the spec's "
                                   f"{e.manifest.phase} GPU is compute {e.expected_cc}")
    _check_here(report, here=here, nvml=nvml)
    return report
