"""``pdtrt doctor``: GPUs (NVML), embedded Triton, ucxx, TensorRT-LLM on this machine."""

from __future__ import annotations

import click

from pdtrt.cli.render import emit_json, gib, json_option
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.doctor import run_doctor


@click.command("doctor")
@json_option
def doctor(as_json: bool) -> None:
    """Report what this machine can run. Never fails on a missing part: it says what is missing
    and what needs it."""
    report = run_doctor(load_catalog())
    if as_json:
        emit_json(report.to_dict())
        return
    for check in report.checks:
        click.echo(f"{check.status.value:<8} {check.name}: {check.detail}")
        if check.status.value != "ok":
            click.echo(f"{'':<8} needed for: {check.needed_for}")
    for gpu in report.gpus.gpus:
        mapped = gpu.catalog_key or "not in the catalog"
        click.echo(f"  GPU {gpu.index}: {gpu.name}, {gib(gpu.memory_bytes)}, compute "
                   f"{gpu.compute_capability} -> {mapped}")
    if not report.gpus.gpus:
        click.echo("  no GPU on this machine: the reference target runs on the CPU; build "
                   "trtllm-* engines on the target GPUs")
