"""``pdtrt preflight REPO``: can this environment run the repository's models?"""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.cli.render import EXIT_EXPECTED_ERROR, emit_json, json_option
from pdtrt.serve.preflight import run_preflight


@click.command("preflight")
@click.argument("repository", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
def preflight(repository: Path, as_json: bool) -> None:
    """Check, before a server starts, that this Python can run REPOSITORY's models.

    Imports every model's 1/model.py as its Triton stub would, and the modules pdtrt loads
    only later (tritonclient for the router's phase calls and the supervisor, transformers
    for the tokenizers, what the target's image recipe installs); runs the engine model's
    LLM-API surface check (TensorRT-LLM itself for a trtllm-1.2 repository); prints the
    versions that decide what runs. Nothing is started or written.

    A generated launch.sh runs it inside the container before `pdtrt serve`. Exits 2 when
    anything is missing, after listing every problem; the fix for a missing package is the
    repository's Dockerfile (launch.sh builds it) or `pip install` of what is named.

    \b
      pdtrt preflight out/repo
      docker run --rm -v $PWD:$PWD -e PYTHONPATH=$PWD IMAGE python3 -m pdtrt.cli.main \\
          preflight $PWD/out/repo
    """
    report = run_preflight(repository.resolve())
    if as_json:
        emit_json(report.to_dict())
    else:
        versions = "  ".join(f"{k} {v or '-'}" for k, v in report.versions.items())
        click.echo(f"preflight of {report.repository} ({report.target or 'no pdtrt-repo.json'})")
        click.echo(f"versions: {versions}")
        for check in report.checks:
            click.echo(f"{check.status.value:<8} {check.name}: {check.detail}")
            if check.status.value != "ok":
                click.echo(f"{'':<8} needed for: {check.needed_for}")
        click.echo("preflight: ok" if report.ok else
                   f"preflight: {len(report.problems)} problem(s); the server would not serve "
                   "every request -- fix them first (the repository's Dockerfile installs what "
                   "pdtrt adds to the image)")
    if not report.ok:
        raise SystemExit(EXIT_EXPECTED_ERROR)
