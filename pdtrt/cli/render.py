"""Shared rendering for the CLI: the ``--json`` option, JSON output, units for humans."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

JSON_META_KEY = "pdtrt.json"
# Exit status of expected errors (PdtrtError), and of a benchmark whose every request failed.
EXIT_EXPECTED_ERROR = 2
# Exit status of a command that did its work and reported it, but lost part of it (a benchmark
# some of whose requests failed).
EXIT_PARTLY_FAILED = 1


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META_KEY] = True
    return value


json_option = click.option(
    "--json", "as_json", is_flag=True, callback=_set_json, expose_value=True,
    help="Print the result as JSON on stdout (errors too).",
)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def console() -> Console:
    """A console for tables; wide and colourless when not writing to a terminal."""
    out = Console(highlight=False)
    return out if out.is_terminal else Console(highlight=False, width=120, color_system=None)


def gib(num_bytes: float) -> str:
    return f"{num_bytes / (1 << 30):.2f} GiB"


def count(n: int) -> str:
    return f"{n:,}"


def tflops(flops: float | None) -> str:
    return "-" if flops is None else f"{flops / 1e12:g}"
