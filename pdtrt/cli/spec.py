"""``pdtrt spec``: validate a deployment spec, print its JSON Schema, write a starter."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.cli.render import emit_json, gib, json_option
from pdtrt.enums import Phase
from pdtrt.errors import PdtrtError, SpecError
from pdtrt.spec.examples import DEFAULT_EXAMPLE, example_names, example_text
from pdtrt.spec.load import load_deployment
from pdtrt.yamlio import write_atomic


@click.group()
def spec() -> None:
    """Work with deployment specs (pdtrt.yaml)."""


def _summary(dep: Deployment) -> list[str]:
    s = dep.spec
    lines = [f"ok: {dep.source}: deployment '{s.name}', target {s.target}, model {s.model.name}"]
    for phase in Phase:
        pool, fit = s.pool(phase), dep.fits[phase]
        lines.append(
            f"  {phase}: {pool.instances} x {dep.gpus[phase].key} TP{pool.tp} PP{pool.pp} "
            f"({pool.num_gpus} {dep.gpus[phase].kind.value.upper()}), "
            f"weights {s.weights(phase)}, KV {s.kv_cache_dtype(phase)}; "
            f"each: weights {gib(fit.weight_bytes)}, KV {gib(fit.kv_budget_bytes)} -> "
            f"{fit.max_concurrent_seqs} sequences of {fit.seq_len} tokens"
        )
    cost = dep.cost_per_hour_usd()
    cost_text = "unknown (a GPU has no price)" if cost is None else f"${cost:.2f}/h"
    lines.append(f"  cost: {cost_text}")
    return lines


@spec.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@json_option
def validate(files: tuple[Path, ...], as_json: bool) -> None:
    """Check spec FILES: schema, cross-field rules, model config, GPUs and memory fit.

    Every problem is reported with its YAML path and line. Exits 2 if any file is invalid.
    """
    results: list[dict[str, object]] = []
    failed = 0
    for file in files:
        try:
            dep = load_deployment(file)
        except SpecError as exc:
            failed += 1
            if as_json:
                results.append({"file": str(file), "valid": False, **exc.to_dict()})
            else:
                click.echo(f"error: {exc.message}", err=True)
                if exc.hint:
                    click.echo(f"hint: {exc.hint}", err=True)
            continue
        if as_json:
            results.append({"file": str(file), "valid": True, "deployment": dep.to_dict()})
        else:
            click.echo("\n".join(_summary(dep)))
    if as_json:
        emit_json(results[0] if len(results) == 1 else results)
    if failed:
        raise click.exceptions.Exit(2)


@spec.command("schema")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write the schema to this file instead of stdout.")
@json_option
def schema(output: Path | None, as_json: bool) -> None:
    """Print the JSON Schema of pdtrt.yaml (for editors: yaml-language-server).

    The schema is JSON already; --json is accepted for uniformity.
    """
    text = json.dumps(DeploymentSpec.model_json_schema(), indent=2) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        write_atomic(output, text)
        if as_json:
            emit_json({"written": str(output)})
        else:
            click.echo(f"wrote {output}")


@spec.command("init")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=Path("pdtrt.yaml"),
              show_default=True, help="Where to write the spec ('-' for stdout).")
@click.option("--example", type=click.Choice(example_names()), default=DEFAULT_EXAMPLE,
              show_default=True, help="Which commented example to start from.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@json_option
def init(output: Path, example: str, force: bool, as_json: bool) -> None:
    """Write a commented starter spec.

    llama3-8b-h100-l40s is the seed scenario (Llama-3.1-8B, prefill on H100 SXM,
    decode on L40S, ISL 3000 / OSL 500) on trtllm-1.2 (NGC 26.07, one Triton server per host);
    llama3-8b-h100-l40s-trtllm-0.21 is the same on the legacy trtllm-0.21 (NGC 25.08);
    reference-cpu is the CPU reference deployment.
    """
    text = example_text(example)
    if str(output) == "-":
        click.echo(text, nl=False)
        return
    if output.exists() and not force:
        raise PdtrtError(f"{output} already exists", hint="pass --force to overwrite it, or "
                         "choose another path with -o")
    write_atomic(output, text)
    if as_json:
        emit_json({"written": str(output), "example": example})
    else:
        click.echo(f"wrote {output} (example {example}); check it with: pdtrt spec validate "
                   f"{output}")
