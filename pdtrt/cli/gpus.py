"""``pdtrt gpus``: the GPU catalog, with prices."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from pdtrt.cli.render import console, emit_json, json_option, tflops
from pdtrt.facts.catalog import load_catalog, load_prices


@click.command("gpus")
@click.option("--prices", type=click.Path(path_type=Path, dir_okay=False),
              help="YAML/JSON file of GPU name -> USD per GPU-hour overriding the defaults.")
@json_option
def gpus(prices: Path | None, as_json: bool) -> None:
    """List the GPU catalog: dense BF16/FP8 TFLOP/s, memory, bandwidth, links, price.

    Figures are datasheet peaks (dense, no sparsity); prices are defaults you override with
    --prices or per pool in pdtrt.yaml.
    """
    catalog = load_catalog(load_prices(prices) if prices else None)
    if as_json:
        emit_json([g.model_dump(mode="json") for g in catalog])
        return
    table = Table(title="pdtrt GPU catalog (dense peaks; links per direction)")
    for col in ("key", "SM", "BF16 TFLOP/s", "FP8 TFLOP/s", "memory GiB", "HBM/GDDR TB/s",
                "GPU link GB/s", "$/GPU-h"):
        table.add_column(col, justify="left" if col == "key" else "right", no_wrap=True)
    for g in catalog:
        price = "-" if g.price_per_hour_usd is None else f"{g.price_per_hour_usd:.3f}"
        link = "-" if g.gpu_link == "none" else f"{g.gpu_link} {g.gpu_link_bytes_per_s / 1e9:g}"
        table.add_row(g.key, g.compute_capability or "-", tflops(g.bf16_dense_flops_per_s),
                      tflops(g.fp8_dense_flops_per_s), f"{g.memory_bytes / (1 << 30):g}",
                      f"{g.memory_bw_bytes_per_s / 1e12:g}", link, price)
    console().print(table)
