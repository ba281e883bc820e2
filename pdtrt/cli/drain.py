"""``pdtrt drain``: take engine models out of their pools without losing a request."""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.cli.render import emit_json, json_option
from pdtrt.engine_io import DrainAction
from pdtrt.errors import ServerError
from pdtrt.serve.drain import DrainState, drainable_models
from pdtrt.serve.drain import drain as drain_models
from pdtrt.serve.launcher import read_state


@click.command("drain")
@click.argument("models", nargs=-1)
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="The work directory of `pdtrt serve --detach` (its server's gRPC URL).")
@click.option("--url", help="The server's gRPC HOST:PORT (instead of --workdir).")
@click.option("--repository", type=click.Path(file_okay=False, path_type=Path),
              help="Without MODELS: drain every pdtrt engine model of this repository "
              "[default: the work directory's].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0), default=60,
              show_default=True, help="Seconds to wait until drained (exit 2 past it).")
@click.option("--resume", is_flag=True, help="End the drain: take new requests again.")
@click.option("--status", is_flag=True, help="Only show each model's drain state.")
@json_option
def drain(models: tuple[str, ...], workdir: Path | None, url: str | None,
          repository: Path | None, timeout_s: float, resume: bool, status: bool,
          as_json: bool) -> None:
    """Drain MODELS (e.g. decode_b) of a running server: they take no new requests (the
    routers choose them no more), finish those in flight, and the command returns once they
    are drained."""
    if resume and status:
        raise click.UsageError("--resume and --status exclude each other")
    if (workdir is None) == (url is None):
        raise click.UsageError("give the server as --workdir DIR or --url HOST:PORT")
    if workdir is not None:
        url = str(read_state(workdir)["endpoints"]["grpc"])  # type: ignore[index]
        repository = repository or workdir / "repo"
    names = list(models)
    if not names:
        if repository is None:
            raise click.UsageError("name the MODELS, or give --repository (or --workdir)")
        names = drainable_models(repository)
        if not names:
            raise ServerError(f"{repository} has no pdtrt engine model to drain")
    action = DrainAction.RESUME if resume else DrainAction.STATUS if status else DrainAction.DRAIN
    assert url is not None

    def progress(states: dict[str, DrainState]) -> None:
        if not as_json and action is DrainAction.DRAIN:
            click.echo("draining: " + ", ".join(f"{m} {s.num_in_flight} in flight"
                                                + (f", {s.num_held} KV held" if s.num_held else "")
                                                for m, s in states.items()), err=True)

    states = drain_models(url, names, action=action, timeout_s=timeout_s, on_progress=progress)
    if as_json:
        emit_json({"url": url, "action": action.value,
                   "models": {m: s.to_dict() for m, s in states.items()}})
        return
    for model, state in states.items():
        word = ("drained" if state.drained else "draining") if state.draining else "serving"
        click.echo(f"{model}: {word} ({state.num_in_flight} in flight, {state.num_held} KV held)")
