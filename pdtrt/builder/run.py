"""Running a :class:`BuildPlan`: preflight checks, steps, resume, cleanup, manifests.

Preflight is the target's (:meth:`~pdtrt.targets.base.TargetSupport.prepare_host`; trtllm-0.21:
every phase's GPU present locally with the same compute capability -- NVML, injectable;
``force`` skips this -- and the TensorRT-LLM tools and version of the target,
:mod:`pdtrt.targets.toolchain`). Then each step runs -- external steps as a subprocess whose
output goes line by line to its log file and to the ``progress`` callback, in-process steps by
the target. A step whose output directory carries a stamp with the same input hash is skipped
(resume); a failed step's output directory is removed and the error names its log. After a
phase's last step its ``pdtrt-engine.json`` is written.

The library never prints: ``progress`` receives :class:`ProgressEvent` s; the CLI renders them.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.manifest import STAMP_NAME, EngineManifest, KVLayout, write_manifest
from pdtrt.blueprint.steps import BuildPlan, BuildStep, PhasePlan
from pdtrt.enums import Phase
from pdtrt.errors import BuildError
from pdtrt.targets.base import BuildHost, TargetSupport
from pdtrt.targets.registry import target_support
from pdtrt.targets.toolchain import Toolchain
from pdtrt.version import __version__

__all__ = ["BuildResult", "ProgressEvent", "ProgressKind", "StepResult", "StepStatus",
           "run_build"]


class ProgressKind(StrEnum):
    START = "start"
    LINE = "line"  # one line of a subprocess's output
    SKIP = "skip"
    DONE = "done"


class StepStatus(StrEnum):
    RAN = "ran"
    SKIPPED = "skipped"  # outputs exist for unchanged inputs


@dataclass(frozen=True, kw_only=True)
class ProgressEvent:
    step: str
    index: int  # 1-based
    total: int
    kind: ProgressKind
    line: str = ""


@dataclass(frozen=True, kw_only=True)
class StepResult:
    name: str
    status: StepStatus
    seconds: float
    log_file: str
    input_hash: str

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "status": str(self.status), "seconds": round(self.seconds, 3),
                "log_file": self.log_file, "input_hash": self.input_hash}


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    steps: tuple[StepResult, ...]
    manifests: dict[Phase, Path]

    def to_dict(self) -> dict[str, object]:
        return {"steps": [s.to_dict() for s in self.steps],
                "manifests": {str(p): str(m) for p, m in self.manifests.items()}}


def _fingerprint(path: Path) -> list[Any]:
    """Content fingerprint of a file or directory: small files by hash, large ones by size."""
    if path.is_file():
        files = [path]
        root = path.parent
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != STAMP_NAME)
        root = path
    else:
        return [str(path), None]
    out: list[Any] = []
    for f in files:
        size = f.stat().st_size
        digest = hashlib.sha256(f.read_bytes()).hexdigest() if size <= 1 << 20 else None
        out.append([str(f.relative_to(root)), size, digest])
    return out


def _input_hash(step: BuildStep, extra: dict[str, str]) -> str:
    data = {"kind": str(step.kind), "argv": list(step.argv), "extra": extra,
            "inputs": [_fingerprint(p) for p in step.inputs]}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _stamp_matches(step: BuildStep, digest: str) -> bool:
    stamp = step.output_dir / STAMP_NAME
    try:
        return json.loads(stamp.read_text())["input_hash"] == digest
    except (OSError, ValueError, KeyError):
        return False


def _write_stamp(step: BuildStep, digest: str) -> None:
    text = json.dumps({"step": step.name, "input_hash": digest}, indent=2, sort_keys=True)
    (step.output_dir / STAMP_NAME).write_text(text + "\n", encoding="utf-8")


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _tail(log: Path, n: int = 5) -> str:
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _run_external(step: BuildStep, emit: Callable[[str], None]) -> None:
    step.log_file.parent.mkdir(parents=True, exist_ok=True)
    with step.log_file.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(step.argv) + "\n")
        log.flush()
        try:
            proc = subprocess.Popen(list(step.argv), stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace")
        except OSError as exc:
            raise BuildError(f"step {step.name}: cannot start {step.argv[0]}: {exc.strerror}",
                             hint="run inside the target's container (see docs/build.md)"
                             ) from None
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            emit(line.rstrip("\n"))
        status = proc.wait()
    if status != 0:
        raise BuildError(f"step {step.name} failed with exit status {status}; log: "
                         f"{step.log_file}\n{_tail(step.log_file)}",
                         hint="fix the cause shown in the log and run the same command again; "
                         "finished steps are skipped")


def _manifest(plan: BuildPlan, ph: PhasePlan, dep: Deployment, *, hashes: dict[str, str],
              host: BuildHost) -> EngineManifest:
    model = dep.model
    gpu_name, compute_capability = host.manifest_gpu(ph.gpu)
    return EngineManifest(
        phase=ph.phase, target=plan.target, model=dep.spec.model.name, gpu_name=gpu_name,
        compute_capability=compute_capability, tp=ph.tp, pp=ph.pp, weights=ph.weights,
        kv_layout=KVLayout(num_layers=model.num_layers, num_kv_heads=model.num_kv_heads,
                           head_dim=model.head_dim, kv_dtype=ph.kv_dtype,
                           tokens_per_block=int(ph.settings["tokens_per_block"])),
        versions=dict(host.versions),
        build_settings={"profile": ph.settings.profile, "settings": ph.settings.to_dict(),
                        "notes": list(ph.notes),
                        "steps": {s.name: list(s.argv) for s in ph.steps}},
        input_hashes=hashes, pdtrt_version=__version__,
    )


def _execute(step: BuildStep, dep: Deployment, support: TargetSupport,
             notify: Callable[..., None]) -> StepResult:
    """Run one step unless its stamp says its outputs are current; clean up on failure."""
    digest = _input_hash(step, support.step_inputs(step, dep))
    if _stamp_matches(step, digest):
        notify(ProgressKind.SKIP)
        return StepResult(name=step.name, status=StepStatus.SKIPPED, seconds=0.0,
                          log_file=str(step.log_file), input_hash=digest)
    notify(ProgressKind.START)
    _remove(step.output_dir)  # stale or partial outputs of an earlier run
    started = time.monotonic()
    try:
        if step.in_process:
            support.run_in_process(step, dep,
                                   progress=lambda line: notify(ProgressKind.LINE, line))
        else:
            _run_external(step, lambda line: notify(ProgressKind.LINE, line))
        if not step.output_dir.is_dir():
            raise BuildError(f"step {step.name} wrote nothing into {step.output_dir}; "
                             f"log: {step.log_file}")
        _write_stamp(step, digest)
    except BaseException:
        _remove(step.output_dir)
        raise
    notify(ProgressKind.DONE)
    return StepResult(name=step.name, status=StepStatus.RAN, seconds=time.monotonic() - started,
                      log_file=str(step.log_file), input_hash=digest)


def run_build(plan: BuildPlan, dep: Deployment, *, force: bool = False, nvml: Any = None,
              toolchain: Toolchain | None = None,
              progress: Callable[[ProgressEvent], None] | None = None) -> BuildResult:
    """Run ``plan``; raises :class:`GPUMismatchError`, :class:`ToolchainError`, BuildError."""
    notify = progress or (lambda _event: None)
    support = target_support(plan.target)
    host = support.prepare_host(plan, force=force, nvml=nvml, toolchain=toolchain)
    results: list[StepResult] = []
    hashes: dict[str, str] = {}
    manifests: dict[Phase, Path] = {}
    total = len(plan.steps)
    for index, step in enumerate(plan.steps, start=1):
        result = _execute(step, dep, support, lambda kind, line="", s=step, i=index: notify(
            ProgressEvent(step=s.name, index=i, total=total, kind=kind, line=line)))
        results.append(result)
        hashes[step.name] = result.input_hash
        finished = next((ph for ph in plan.phases if ph.steps and ph.steps[-1] is step), None)
        if finished is not None:  # a phase is complete: its manifest, before the next phase
            manifests[finished.phase] = write_manifest(finished.engine_dir, _manifest(
                plan, finished, dep, host=host, hashes={
                    s.name: hashes[s.name] for s in plan.steps
                    if s.phase in (finished.phase, None)}))
    return BuildResult(steps=tuple(results), manifests=manifests)
