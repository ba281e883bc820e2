"""``pdtrt build``: plan (``--dry-run``) or run the engine builds of a deployment spec."""

from __future__ import annotations

import shlex
from pathlib import Path

import click
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT
from pdtrt.blueprint.steps import BuildPlan
from pdtrt.builder.plan import HostBuild, host_builds, plan_build
from pdtrt.builder.run import BuildResult, ProgressEvent, ProgressKind, StepStatus, run_build
from pdtrt.cli.render import console, emit_json, json_option
from pdtrt.enums import Phase
from pdtrt.spec.load import load_deployment


def plan_lines(plan: BuildPlan) -> list[str]:
    head = f"build plan: {plan.deployment} (target {plan.target}"
    head += f", run inside {plan.container})" if plan.container else ", runs on this machine)"
    lines = [head, f"engines: {plan.layout.deployment_dir}/"]
    lines += [f"note: {n}" for n in plan.notes]
    steps = {s.name: (i, s) for i, s in enumerate(plan.steps, start=1)}
    shared = [s for s in plan.steps if s.phase is None]
    for s in shared:
        lines.append(f"step {steps[s.name][0]}: {s.name} (in-process) -> {s.output_dir}/")
        lines.append(f"  {s.what}")
    for ph in plan.phases:
        lines.append(
            f"{ph.phase}: {ph.gpu.key}"
            + (f" (compute {ph.gpu.compute_capability})" if ph.gpu.compute_capability else "")
            + f" TP{ph.tp} PP{ph.pp}, weights {ph.weights}, KV {ph.kv_dtype}, profile "
            f"{ph.settings.profile} -> {ph.engine_dir}/")
        width = max(len(n) for n in ph.settings.values)
        for name, setting in ph.settings.values.items():
            if setting.value is None:
                continue
            value = setting.value
            shown = ("enable" if value else "disable") if isinstance(value, bool) else value
            lines.append(f"  {name:<{width}}  {shown!s:<8} {setting.describe()}")
        lines += [f"  note: {n}" for n in ph.notes]
        for s in ph.steps:
            where = (f"on a {s.gpu.key} (compute {s.gpu.compute_capability})" if s.gpu
                     else "in-process, any machine")
            lines.append(f"  step {steps[s.name][0]}: {s.name} {where} -> {s.output_dir}/")
            if s.argv:
                lines.append(f"    $ {shlex.join(s.argv)}")
            if s.what:
                lines.append(f"    {s.what}")
            lines.append(f"    log: {s.log_file}")
    return lines


def _steps_text(steps: tuple[int, ...]) -> str:
    if len(steps) == 1:
        return f"step {steps[0]}"
    if steps[-1] - steps[0] == len(steps) - 1:
        return f"steps {steps[0]}-{steps[-1]}"
    return "steps " + ", ".join(str(s) for s in steps)


def host_lines(plan: BuildPlan, hosts: tuple[HostBuild, ...], command: list[str]) -> list[str]:
    """What each build host runs (``command``: ``pdtrt build SPEC`` as the user gave it), and
    where the engines must be before the repository is served."""
    if not hosts:
        return []
    if any(s.gpu is not None for s in plan.steps):
        lines = [f"hosts: each engine is built on its own GPU type, inside {plan.container} "
                 "(docs/build.md):"]
    else:
        lines = ["hosts: no step needs a GPU; build each phase on the host that serves it "
                 f"(inside {plan.container}, or wherever pdtrt runs; docs/build.md):"]
    for h in hosts:
        phases = ", ".join(str(p) for p in h.phases)
        lines.append(f"  {h.gpu} host (compute {h.compute_capability}): "
                     f"{_steps_text(h.steps)} ({phases})")
        lines.append(f"    $ {shlex.join([*command, *h.args])}")
    dirs = ", ".join(f"{p.engine_dir}/" for p in plan.phases)
    lines.append(f"then: {dirs} at the same path on every host that serves the repository "
                 "(its model configs name them), and "
                 f"`{shlex.join(['pdtrt', 'engines', 'check', *command[2:]])}`")
    return lines


def _result_lines(result: BuildResult) -> list[str]:
    lines = []
    for r in result.steps:
        if r.status is StepStatus.SKIPPED:
            lines.append(f"skipped {r.name} (outputs exist for unchanged inputs)")
        else:
            lines.append(f"built {r.name} in {r.seconds:.1f} s (log: {r.log_file})")
    lines += [f"wrote {m}" for m in result.manifests.values()]
    return lines


@click.command("build")
@click.argument("spec_file", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("--phase", "phase_name", type=click.Choice(["prefill", "decode", "all"]),
              default="all", show_default=True, help="Which phase's engine to build.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan (commands, GPU per step, output directories); run nothing.")
@click.option("--engines-dir", type=click.Path(path_type=Path), default=DEFAULT_ENGINES_ROOT,
              show_default=True, help="Root of the engine directories.")
@click.option("--force", is_flag=True,
              help="Build even when the local GPU's compute capability differs from the "
              "phase's GPU (the engine then only loads on GPUs like the local one).")
@json_option
def build(spec_file: Path, phase_name: str, dry_run: bool, engines_dir: Path, force: bool,
          as_json: bool) -> None:
    """Build the engines of SPEC: engines/<deployment>/<phase>/ with pdtrt-engine.json.

    \b
    trtllm-1.2:  the LLM-API options file per phase (and ModelOpt FP8 quantization when
      the phase asks FP8 weights, inside nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3
      on the phase's GPU type).
    trtllm-0.21: checkpoint conversion + trtllm-build per phase, run inside
      nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3 on the phase's GPU type.
    reference:   a seeded tiny Llama checkpoint and an offline-trained tokenizer (CPU).

    Steps whose outputs exist for unchanged inputs are skipped; a failed step's outputs
    are removed. Logs: engines/<deployment>/logs/.
    """
    dep = load_deployment(spec_file)
    phases = tuple(Phase) if phase_name == "all" else (Phase(phase_name),)
    plan = plan_build(dep, engines_root=engines_dir, phases=phases)
    if dry_run:
        hosts = host_builds(plan)
        if as_json:
            emit_json({"dry_run": True, "plan": plan.to_dict(),
                       "hosts": [h.to_dict() for h in hosts]})
        else:
            command = ["pdtrt", "build", str(spec_file)]
            if engines_dir != DEFAULT_ENGINES_ROOT:
                command += ["--engines-dir", str(engines_dir)]
            click.echo("\n".join(plan_lines(plan) + host_lines(plan, hosts, command)))
        return
    if as_json:
        result = run_build(plan, dep, force=force)
        emit_json({"dry_run": False, "plan": plan.to_dict(), "result": result.to_dict()})
        return
    out = console()
    if not out.is_terminal:  # logs and pipes get the summary only
        click.echo("\n".join(_result_lines(run_build(plan, dep, force=force))))
        return
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=out, transient=True) as bar:
        task = bar.add_task("starting", total=len(plan.steps))

        def show(event: ProgressEvent) -> None:
            text = f"[{event.index}/{event.total}] {event.step}"
            if event.kind is ProgressKind.LINE and event.line:
                text += f": {event.line[:80]}"
            bar.update(task, description=text,
                       completed=event.index - (event.kind in (ProgressKind.START,
                                                               ProgressKind.LINE)))

        result = run_build(plan, dep, force=force, progress=show)
    click.echo("\n".join(_result_lines(result)))
