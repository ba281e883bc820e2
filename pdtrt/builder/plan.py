"""The build plan: which steps make each phase's engine, with exact argv, GPU and directories.

``plan_build`` turns a :class:`Deployment` into a :class:`BuildPlan` (:mod:`pdtrt.blueprint.steps`)
without running anything, in named steps: what the target's builds read and the steps both
phases share; per phase, the settings (:mod:`pdtrt.blueprint.settings`: spec > profile > computed,
with the profile switches the target takes), then the target's own rules and steps for them;
last, the checks across phases. Every target-specific answer comes from the target's
:class:`~pdtrt.targets.base.TargetSupport`:

- ``trtllm-0.21``: checkpoint conversion and ``trtllm-build`` per phase, after TensorRT-LLM's
  build rules, every argv checked by the version's flag schema (:mod:`pdtrt.targets.trtllm_build`);
- ``reference``: the tokenizer into ``<root>/<name>/tokenizer/`` and the seeded HF checkpoint
  into each phase directory (in-process steps, no argv).

A rejected combination raises :class:`BuildRejected` with every reason before anything runs.
Running the plan is :mod:`pdtrt.builder.run`. :func:`host_builds` says which host runs which
part of a plan whose engines are built on their own GPU types.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.profiles import load_profiles, select_profile
from pdtrt.blueprint.settings import resolve_settings
from pdtrt.blueprint.steps import BuildPlan, PhasePlan
from pdtrt.enums import Phase
from pdtrt.errors import BuildRejected
from pdtrt.targets.base import BuildContext, TargetSupport
from pdtrt.targets.registry import target_support

__all__ = ["HostBuild", "host_builds", "plan_build"]


def plan_build(dep: Deployment, *, engines_root: Path, phases: tuple[Phase, ...] = tuple(Phase),
               profiles_dir: Path | None = None, examples_dir: str | None = None) -> BuildPlan:
    """Plan the builds of ``phases``; raises :class:`BuildRejected` listing every reason.

    ``examples_dir``: where the target's build scripts live (trtllm-0.21: TensorRT-LLM's
    ``examples/``; default ``PDTRT_TRTLLM_EXAMPLES``, else the target's own path).
    """
    support = target_support(dep.spec.target)
    profiles = load_profiles(profiles_dir)
    chosen = {phase: resolve_settings(dep, phase, select_profile(profiles, dep.gpus[phase].key,
                                                                 phase),
                                      switches=support.build_switches) for phase in Phase}
    ctx = BuildContext(dep=dep, layout=EngineLayout(engines_root, dep.spec.name),
                       examples_dir=examples_dir, chosen=chosen)
    source = support.build_source(ctx)
    phase_plans: list[PhasePlan] = []
    reasons: list[str] = []
    for phase in phases:
        try:
            phase_plans.append(_plan_phase(support, ctx, phase))
        except BuildRejected as exc:
            reasons += exc.reasons
    reasons += _cross_phase_problems(phase_plans)
    if reasons:
        raise BuildRejected(reasons, hint="fix the spec (or the engine profile) and run "
                            "`pdtrt build SPEC --dry-run` again")
    return BuildPlan(deployment=dep.spec.name, target=dep.spec.target,
                     container=support.container_image, model_dir=source.model_dir,
                     layout=ctx.layout, phases=tuple(phase_plans),
                     steps=source.steps + tuple(s for p in phase_plans for s in p.steps),
                     notes=source.notes)


def _plan_phase(support: TargetSupport, ctx: BuildContext, phase: Phase) -> PhasePlan:
    """One phase: its settings as chosen, then as the target builds them, and its steps."""
    dep = ctx.dep
    gpu, pool = dep.gpus[phase], dep.spec.pool(phase)
    built = support.plan_phase(ctx, phase, ctx.chosen[phase])
    return PhasePlan(
        phase=phase, gpu=gpu, tp=pool.tp, pp=pool.pp, weights=dep.spec.weights(phase),
        kv_dtype=dep.spec.kv_cache_dtype(phase), settings=built.settings, notes=built.notes,
        engine_dir=ctx.layout.phase_dir(phase), steps=built.steps)


def _cross_phase_problems(phase_plans: list[PhasePlan]) -> list[str]:
    """The two engines must share a KV block size to hand KV blocks over."""
    tpbs = {p.phase: p.settings["tokens_per_block"] for p in phase_plans}
    if len(set(tpbs.values())) > 1:
        return ["prefill and decode engines would use different tokens_per_block "
                f"({', '.join(f'{k} {v}' for k, v in tpbs.items())}); KV blocks could not "
                "be handed over; set <pool>.engine.tokens_per_block in the spec"]
    return []


@dataclass(frozen=True, kw_only=True)
class HostBuild:
    """What one build host runs: the phases whose GPU type it has, and their steps."""

    gpu: str  # catalog key
    compute_capability: str | None
    phases: tuple[Phase, ...]
    steps: tuple[int, ...]  # 1-based positions in ``BuildPlan.steps``
    args: tuple[str, ...]  # ``pdtrt build SPEC`` arguments that select them

    def to_dict(self) -> dict[str, object]:
        return {"gpu": self.gpu, "compute_capability": self.compute_capability,
                "phases": [str(p) for p in self.phases], "steps": list(self.steps),
                "args": list(self.args)}


def host_builds(plan: BuildPlan) -> tuple[HostBuild, ...]:
    """One host per GPU type of the plan's phases (an engine loads only on the architecture it
    was built on); empty when the target builds on this machine (no container)."""
    if plan.container is None:
        return ()
    gpus = list(dict.fromkeys(p.gpu.key for p in plan.phases))
    hosts = []
    for key in gpus:
        phases = tuple(p for p in plan.phases if p.gpu.key == key)
        # the shared steps (trtllm-1.2's Hub snapshot) run on every host, with each phase
        names = {s.name for p in phases for s in p.steps} | {
            s.name for s in plan.steps if s.phase is None}
        args = () if len(phases) == len(Phase) else ("--phase", str(phases[0].phase))
        hosts.append(HostBuild(
            gpu=key, compute_capability=phases[0].gpu.compute_capability,
            phases=tuple(p.phase for p in phases), args=args,
            steps=tuple(i for i, s in enumerate(plan.steps, 1) if s.name in names)))
    return tuple(hosts)
