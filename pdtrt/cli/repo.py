"""``pdtrt repo``: generate a Triton model repository from a spec; ``pdtrt repo validate``.

``pdtrt repo SPEC -o DIR`` is short for ``pdtrt repo generate SPEC -o DIR``.
"""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.blueprint.launch import LaunchPlan, host_command
from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT
from pdtrt.cli.render import emit_json, json_option
from pdtrt.errors import RepoInvalidError
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.spec.load import load_deployment


class _RepoGroup(click.Group):
    """A group whose default subcommand is ``generate`` (``pdtrt repo SPEC -o DIR``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["generate", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_RepoGroup)
def repo() -> None:
    """Generate (`pdtrt repo SPEC -o DIR`) or validate (`pdtrt repo validate DIR`) a Triton
    model repository."""


@repo.command("generate")
@click.argument("spec_file", metavar="SPEC", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Repository directory to write (atomically).")
@click.option("--mode", type=click.Choice([m.value for m in RepoMode]),
              default=RepoMode.DISAGGREGATED.value, show_default=True,
              help="disaggregated: ensemble -> router -> prefill/decode; aggregated: "
              "ensemble_aggregated -> one engine model; both: both ensembles; pools: only the "
              "engine models of pools with an endpoint (the server their router calls).")
@click.option("--force", is_flag=True, help="Replace DIR if it exists.")
@click.option("--engines-dir", type=click.Path(path_type=Path), default=DEFAULT_ENGINES_ROOT,
              show_default=True, help="Root of the built engines (ROOT/<name>/<phase>/).")
@json_option
def generate(spec_file: Path, out: Path, mode: str, force: bool, engines_dir: Path,
             as_json: bool) -> None:
    """Write the model repository of SPEC to DIR (every config.pbtxt schema-checked)."""
    dep = load_deployment(spec_file)
    result = generate_repo(dep, out, mode=RepoMode(mode), engines_root=engines_dir,
                           force=force)
    if as_json:
        data = result.to_dict()
        if result.plan.launch is not None:
            data["hosts"] = _host_runs(result.plan.launch, out)
        emit_json(data)
        return
    plan = result.plan
    click.echo(f"wrote {out}: {dep.spec.target} repository, mode {plan.mode}")
    for m in plan.models:
        click.echo(f"  {m.name:<20} {m.backend:<12} max_batch_size {m.max_batch_size:<5} "
                   f"instances {m.instance_count}{'  decoupled' if m.decoupled else ''}")
    for e in plan.ensembles:
        steps = " -> ".join(str(name) for name, _ in e.steps)
        click.echo(f"  {e.name:<20} ensemble     {steps}")
    for name, path in plan.engine_dirs.items():
        state = "" if path.is_dir() else "  (not built yet)"
        click.echo(f"  engine {name}: {path}{state}")
    if plan.launch is not None:
        what = (f"MPI world size {plan.launch.world_size}" if plan.launch.mpi
                else "one Triton server")
        click.echo(f"  launch: {out / 'launch.sh'} ({what}, "
                   f"environment in {out / 'pdtrt.env'}); each host runs, in this order:")
        for run in _host_runs(plan.launch, out):
            click.echo(f"    {run['host']}")
            click.echo(f"      $ {run['command']}")
    for pool, urls in plan.remote.items():
        click.echo(f"  pool {pool}: another Triton server at {urls} (its host serves "
                   f"`pdtrt repo {spec_file} -o DIR --mode pools`)")


def _host_runs(launch: LaunchPlan, out: Path) -> list[dict[str, str]]:
    """What each host runs to start its part of the MPI world, in start order."""
    return [{"host": h.summary, "command": host_command(launch, h, str(out / "launch.sh"))}
            for h in launch.start_order]


@repo.command("validate")
@click.argument("directory", metavar="DIR", type=click.Path(path_type=Path))
@click.option("--require-engines", is_flag=True,
              help="Missing engine directories and manifests are problems, not warnings.")
@json_option
def validate(directory: Path, require_engines: bool, as_json: bool) -> None:
    """Check the repository DIR: schema, ensemble wiring, router, engines. Exits 2 on problems."""
    report = validate_repo(directory, require_engines=require_engines)
    if as_json and report.ok:
        emit_json(report.to_dict())
        return
    if not as_json:
        for w in report.warnings:
            click.echo(f"warning: {w}", err=True)
    if not report.ok:
        exc = RepoInvalidError(list(report.problems), source=str(directory),
                               hint="fix the listed models, or regenerate with `pdtrt repo`")
        if as_json:
            data = report.to_dict()
            data.update(exc.to_dict())
            emit_json(data)
            raise click.exceptions.Exit(2)
        raise exc
    click.echo(f"ok: {directory}: {len(report.models)} models, target "
               f"{report.target or 'unknown'}, {len(report.warnings)} warning(s)")
