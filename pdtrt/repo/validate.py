"""``pdtrt repo validate``: check any Triton model repository, generated or hand-edited.

Every problem is collected, none stops the others: each model's ``config.pbtxt`` against
Triton's schema, NVIDIA-template mistakes (unfilled ``${...}``, ``max_batch_size: 0`` with
``reshape: { shape: [ ] }``), version directories and Python shims, ensemble wiring and router
parameters (:mod:`pdtrt.repo.wiring`), pdtrt roles and their parameters, what an engine
backend needs of a model's parameters (a ``tensorrtllm`` model without a parameter its backend
requires does not load: :meth:`~pdtrt.targets.base.TargetSupport.engine_config_problems`), and
the engine
directories: their manifests must match the repository's target, the phase of the model
using them, and each other (KV layout, via :func:`pdtrt.blueprint.manifest.compatibility_problems`).

An engine directory that does not exist yet is a *warning* (repositories are generated before
engines are built) unless ``require_engines``; so is one without ``pdtrt-engine.json``, and a
``tokenizer_dir`` that is not a local directory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from pdtrt.blueprint.limits import manifest_if_present
from pdtrt.blueprint.manifest import EngineManifest, compatibility_problems
from pdtrt.engine_io import PHASE_ROLES, Param, Role
from pdtrt.ensemble import GPT_MODEL_PATH
from pdtrt.enums import Phase, Target, TritonBackend
from pdtrt.errors import ConfigParseError, PdtrtError
from pdtrt.repo.pbtxt import ModelConfig, parse_config
from pdtrt.repo.render import REPO_MANIFEST_NAME
from pdtrt.repo.wiring import (
    CONTEXT_MODEL_NAME,
    GENERATION_MODEL_NAME,
    ensemble_problems,
    parameter,
    router_problems,
)
from pdtrt.targets.base import TargetSupport
from pdtrt.targets.registry import REGISTRY

__all__ = ["ValidationReport", "validate_repo"]

_PLACEHOLDER = re.compile(r"\$\{[^}\n]*\}?")
_REQUIRED_PARAMS = {
    Role.PREFILL: (Param.ENGINE_DIR,), Role.DECODE: (Param.ENGINE_DIR,),
    Role.AGGREGATED: (Param.ENGINE_DIR,), Role.ROUTER: (Param.PREFILL_MODEL, Param.DECODE_MODEL),
    Role.PREPROCESSING: (Param.TOKENIZER_DIR,), Role.POSTPROCESSING: (Param.TOKENIZER_DIR,),
}


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    root: Path
    target: Target | None
    models: tuple[str, ...]
    problems: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, object]:
        return {"root": str(self.root), "ok": self.ok,
                "target": None if self.target is None else str(self.target),
                "models": list(self.models), "problems": list(self.problems),
                "warnings": list(self.warnings)}


@dataclass(frozen=True, kw_only=True)
class _Engine:
    model: str
    phase: Phase | None  # None: aggregated
    path: Path


def _placeholders(name: str, text: str) -> list[str]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        out += [f"{name}: unfilled placeholder {m.group(0)} at line {lineno} (NVIDIA "
                "fill_template.py leaves unknown keys in place)" for m in _PLACEHOLDER.finditer(
                    line.split("#", 1)[0])]
    return out


def _model_problems(name: str, d: Path, cfg: ModelConfig) -> list[str]:
    problems = []
    if cfg.name and cfg.name != name:
        problems.append(f"{name}: config names the model '{cfg.name}', its directory is "
                        f"'{name}'")
    if not (cfg.backend or cfg.platform):
        problems.append(f"{name}: neither backend nor platform is set")
    versions = [v for v in d.iterdir() if v.is_dir() and v.name.isdigit()]
    if not versions:
        problems.append(f"{name}: no version directory (e.g. {name}/1/)")
    if cfg.backend == TritonBackend.PYTHON:
        problems += [f"{name}: {name}/{v.name}/model.py is missing" for v in versions
                     if not (v / "model.py").is_file()]
    scalars = [f"'{i.name}'" for i in cfg.input if i.HasField("reshape") and not i.reshape.shape]
    if cfg.max_batch_size == 0 and scalars:
        problems.append(f"{name}: max_batch_size is 0 but input(s) {', '.join(scalars)} have "
                        "reshape: { shape: [ ] } -- Triton rejects a scalar reshape without a "
                        "batch dim (set max_batch_size > 0, NVIDIA's templates assume it)")
    role = parameter(cfg, Param.ROLE)
    if role is not None:
        if role not in {r.value for r in Role}:
            problems.append(f"{name}: parameter '{Param.ROLE}' is {role!r}, not one of "
                            f"{', '.join(Role)}")
        else:
            problems += [f"{name}: parameter '{k}' is missing or empty"
                         for k in _REQUIRED_PARAMS[Role(role)] if not parameter(cfg, k)]
    return problems


def _backend_support(backend: str, target: Target | None) -> TargetSupport | None:
    """The target whose engine backend is ``backend`` (the repository's first); None for the
    Python backend (pdtrt's engine models: checked by their ``pdtrt_role``)."""
    supports = [s for s in REGISTRY if s.engine_backend == backend
                and s.engine_backend is not TritonBackend.PYTHON]
    return next((s for s in supports if s.target == target), supports[0] if supports else None)


def _backend_problems(configs: dict[str, ModelConfig], target: Target | None) -> list[str]:
    """Each engine model against what its backend reads: a missing required parameter is a
    load failure, a value the backend cannot read is one it silently replaces."""
    problems = []
    for name, cfg in configs.items():
        support = _backend_support(cfg.backend, target)
        if support is None:
            continue
        count = sum(max(g.count, 1) for g in cfg.instance_group) or 1
        params = {k: v.string_value for k, v in cfg.parameters.items()}
        problems += support.engine_config_problems(name, params, instance_count=count)
    return problems


def _engines(configs: dict[str, ModelConfig]) -> list[_Engine]:
    phase_of: dict[str, Phase] = {}
    for cfg in configs.values():
        for key, phase in ((Param.PREFILL_MODEL, Phase.PREFILL),
                           (CONTEXT_MODEL_NAME, Phase.PREFILL),
                           (Param.DECODE_MODEL, Phase.DECODE),
                           (GENERATION_MODEL_NAME, Phase.DECODE)):
            if parameter(cfg, key):
                phase_of[str(parameter(cfg, key))] = phase
    engines = []
    for name, cfg in configs.items():
        role = parameter(cfg, Param.ROLE)
        if role in PHASE_ROLES and parameter(cfg, Param.ENGINE_DIR):
            engines.append(_Engine(model=name, phase=Role(role).phase,
                                   path=Path(str(parameter(cfg, Param.ENGINE_DIR)))))
        elif cfg.backend == TritonBackend.TENSORRTLLM and parameter(cfg, GPT_MODEL_PATH):
            engines.append(_Engine(model=name, phase=phase_of.get(name),
                                   path=Path(str(parameter(cfg, GPT_MODEL_PATH)))))
    return engines


def _engine_findings(engines: list[_Engine], target: Target | None, configs: dict[str,
                     ModelConfig], require: bool) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    warnings: list[str] = []
    missing = problems if require else warnings
    manifests: dict[str, EngineManifest] = {}
    for e in engines:
        if not e.path.is_dir():
            missing.append(f"{e.model}: engine directory {e.path} does not exist (build it with "
                           "`pdtrt build SPEC`)")
            continue
        try:
            manifest = manifest_if_present(e.path)
        except PdtrtError as exc:
            problems.append(f"{e.model}: {exc.message}")
            continue
        if manifest is None:
            missing.append(f"{e.model}: {e.path} has no pdtrt-engine.json: its target and KV "
                           "layout cannot be checked")
            continue
        manifests[e.model] = manifest
        if target is not None and manifest.target != target:
            problems.append(f"{e.model}: engine {e.path} was built for {manifest.target}, the "
                            f"repository is {target}")
        if e.phase is not None and manifest.phase not in (e.phase, None):
            problems.append(f"{e.model}: engine {e.path} is a {manifest.phase} engine, the model "
                            f"serves {e.phase}")
        tpb = parameter(configs[e.model], Param.TOKENS_PER_BLOCK)
        if tpb and tpb != str(manifest.kv_layout.tokens_per_block):
            problems.append(f"{e.model}: parameter tokens_per_block is {tpb}, the engine's is "
                            f"{manifest.kv_layout.tokens_per_block}")
    for name, cfg in configs.items():
        pairs = ((Param.PREFILL_MODEL, Param.DECODE_MODEL),
                 (CONTEXT_MODEL_NAME, GENERATION_MODEL_NAME))
        for pk, dk in pairs:
            p, d = manifests.get(str(parameter(cfg, pk))), manifests.get(str(parameter(cfg, dk)))
            if p is not None and d is not None:
                problems += [f"{name}: {parameter(cfg, pk)} and {parameter(cfg, dk)} cannot "
                             f"hand over KV: {msg}" for msg in compatibility_problems(p, d)]
    return problems, warnings


def _tokenizer_findings(configs: dict[str, ModelConfig]) -> list[str]:
    """Pre/postprocessing load their tokenizer from a local directory."""
    return [f"{name}: tokenizer_dir {tok} does not exist here (the model loads its tokenizer "
            "from that local directory)" for name, cfg in configs.items()
            if parameter(cfg, Param.ROLE) in (Role.PREPROCESSING, Role.POSTPROCESSING)
            and (tok := parameter(cfg, Param.TOKENIZER_DIR)) and not Path(tok).is_dir()]


def _target(root: Path, configs: dict[str, ModelConfig], problems: list[str]) -> Target | None:
    manifest = root / REPO_MANIFEST_NAME
    if manifest.is_file():
        try:
            return Target(json.loads(manifest.read_text(encoding="utf-8"))["target"])
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{REPO_MANIFEST_NAME}: unreadable or without a valid target: {exc}")
    # Without pdtrt-repo.json: the first target whose engine backend an engine model uses,
    # a Python backend last (it says less: any pdtrt engine model may be one).
    backends = {c.backend for c in configs.values() if c.backend == TritonBackend.TENSORRTLLM
                or parameter(c, Param.ROLE) in PHASE_ROLES}
    supports = sorted(REGISTRY, key=lambda s: s.engine_backend is TritonBackend.PYTHON)
    return next((s.target for s in supports if s.engine_backend in backends), None)


def validate_repo(root: Path, *, require_engines: bool = False) -> ValidationReport:
    """Check the repository at ``root``; returns every problem and warning found.

    Raises :class:`PdtrtError` only when ``root`` is not a directory.
    """
    if not root.is_dir():
        raise PdtrtError(f"{root} is not a directory", hint="pass a model repository directory")
    problems: list[str] = []
    configs: dict[str, ModelConfig] = {}
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    for d in dirs:
        path = d / "config.pbtxt"
        if not path.is_file():
            problems.append(f"{d.name}: no config.pbtxt")
            continue
        text = path.read_text(encoding="utf-8")
        problems += _placeholders(d.name, text)
        try:
            cfg = parse_config(text)
        except ConfigParseError as exc:
            problems.append(f"{d.name}: config.pbtxt does not parse with Triton's schema: {exc}")
            continue
        configs[d.name] = cfg
        problems += _model_problems(d.name, d, cfg)
    if not dirs:
        problems.append("no model directories")
    broken = frozenset(d.name for d in dirs) - set(configs)
    for name, cfg in configs.items():
        if cfg.platform == "ensemble":
            problems += ensemble_problems(name, cfg, configs, broken)
        problems += router_problems(name, cfg, configs, broken)
    target = _target(root, configs, problems)
    problems += _backend_problems(configs, target)
    engine_problems, warnings = _engine_findings(_engines(configs), target, configs,
                                                 require_engines)
    (engine_problems if require_engines else warnings).extend(_tokenizer_findings(configs))
    return ValidationReport(root=root, target=target, models=tuple(d.name for d in dirs),
                            problems=tuple(problems + engine_problems), warnings=tuple(warnings))
