"""``pdtrt``: the command group, global options and the error policy.

Expected errors (:class:`pdtrt.errors.PdtrtError`) print ``error: ...`` and ``hint: ...`` on
stderr -- or a JSON object on stdout under ``--json`` -- and exit with status 2. Anything else is
a bug and keeps its traceback. ``--debug`` (or ``PDTRT_DEBUG=1``) shows tracebacks always.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

from pdtrt.cli import (
    bench,
    build,
    deploy,
    doctor,
    drain,
    engines,
    estimate,
    front,
    gpus,
    infer,
    model_info,
    plan,
    preflight,
    repo,
    serve,
    simulate,
    spec,
)
from pdtrt.cli.render import EXIT_EXPECTED_ERROR, JSON_META_KEY, emit_json
from pdtrt.envvars import PDTRT_DEBUG
from pdtrt.errors import PdtrtError
from pdtrt.version import __version__


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PdtrtError as exc:
            if ctx.meta.get("pdtrt.debug"):
                raise
            if ctx.meta.get(JSON_META_KEY):
                emit_json(exc.to_dict())
            else:
                click.echo(f"error: {exc.message}", err=True)
                if exc.hint:
                    click.echo(f"hint: {exc.hint}", err=True)
            ctx.exit(EXIT_EXPECTED_ERROR)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pdtrt")
@click.option("--debug", is_flag=True, envvar=PDTRT_DEBUG,
              help="Show tracebacks and debug logs (also PDTRT_DEBUG=1).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """pdtrt -- prefill/decode disaggregated LLM serving on Triton + TensorRT-LLM.

    One spec (pdtrt.yaml) drives everything. Start with:

    \b
      pdtrt spec init -o pdtrt.yaml     a commented starter spec
      pdtrt spec validate pdtrt.yaml    check it (every problem, with its line)
      pdtrt model-info MODEL --gpu l40s weights, KV bytes, memory fit
      pdtrt gpus                        the GPU catalog with prices
      pdtrt doctor                      what this machine can run

    Every command takes --json for machine-readable output. Expected errors
    exit with status 2.
    """
    ctx.meta["pdtrt.debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


cli.add_command(spec.spec)
cli.add_command(gpus.gpus)
cli.add_command(doctor.doctor)
cli.add_command(model_info.model_info)
cli.add_command(build.build)
cli.add_command(engines.engines)
cli.add_command(repo.repo)
cli.add_command(serve.serve)
cli.add_command(preflight.preflight)
cli.add_command(serve.stop)
cli.add_command(drain.drain)
cli.add_command(front.front)
cli.add_command(estimate.estimate_cmd)
cli.add_command(simulate.simulate_cmd)
cli.add_command(plan.plan_cmd)
cli.add_command(infer.infer)
cli.add_command(bench.bench)
cli.add_command(deploy.deploy)


def main() -> None:
    cli(prog_name="pdtrt")


if __name__ == "__main__":  # python3 -m pdtrt.cli.main: launch.sh in a container, no entry point
    main()
