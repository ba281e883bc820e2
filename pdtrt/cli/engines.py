"""``pdtrt engines``: inspect built engines (``check``: can they serve together, and here?)."""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT
from pdtrt.builder.check import CheckReport, check_engines
from pdtrt.cli.render import emit_json, json_option


@click.group()
def engines() -> None:
    """Work with built engines (engines/<deployment>/<phase>/)."""


def _lines(report: CheckReport) -> list[str]:
    lines = []
    for e in report.engines:
        m = e.manifest
        where = f"{m.gpu_name} (compute {m.compute_capability})" if m.gpu_name else "CPU"
        lines.append(f"engine {e.path}: {m.phase} {m.target} {m.model} TP{m.tp} PP{m.pp} "
                     f"weights {m.weights} on {where}; KV {m.kv_layout.num_layers} layers x "
                     f"{m.kv_layout.num_kv_heads} heads x {m.kv_layout.head_dim} "
                     f"{m.kv_layout.kv_dtype}, {m.kv_layout.tokens_per_block} tokens/block "
                     f"[{m.kv_layout.fingerprint()}]")
    lines += [f"note: {i}" for i in report.info]
    lines += [f"problem: {p}" for p in report.problems]
    verdict = "ok: compatible" if report.ok else f"incompatible: {len(report.problems)} problem(s)"
    lines.append(verdict)
    return lines


@engines.command("check")
@click.argument("targets", metavar="SPEC|DIR...", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))
@click.option("--engines-dir", type=click.Path(path_type=Path), default=DEFAULT_ENGINES_ROOT,
              show_default=True, help="Root of the engine directories (for SPEC arguments).")
@click.option("--here", is_flag=True,
              help="Also require a local GPU (NVML) of each engine's compute capability.")
@json_option
def check(targets: tuple[Path, ...], engines_dir: Path, here: bool, as_json: bool) -> None:
    """Check that prefill and decode engines can hand KV caches to each other.

    Compares the manifests (KV dtype, tokens per block, head size, layers, KV heads,
    TensorRT-LLM version), each manifest with the engine's own config.json, a SPEC's GPUs,
    and with --here the local GPU. Exits 2 on any incompatibility.
    """
    report = check_engines(list(targets), engines_root=engines_dir, here=here)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo("\n".join(_lines(report)))
    if not report.ok:
        raise click.exceptions.Exit(2)
