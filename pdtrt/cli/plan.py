"""``pdtrt plan``: search GPU types, TP, instance counts and engine limits for goodput per $."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from pdtrt.cli.render import console, emit_json, json_option
from pdtrt.enums import KVDType, ServingBackend, WeightQuant
from pdtrt.errors import PdtrtError
from pdtrt.facts.catalog import load_catalog, load_prices
from pdtrt.facts.model import load_model_facts
from pdtrt.perf.factors import load_factors
from pdtrt.planner.search import Plan, PlanCandidate, PlanRequest, plan
from pdtrt.planner.space import SearchBounds
from pdtrt.planner.spec_writer import spec_candidate, spec_text
from pdtrt.sim.config import SloTarget
from pdtrt.spec.load import load_deployment
from pdtrt.yamlio import write_atomic

WEIGHTS = {"bf16": WeightQuant.NONE, "fp8": WeightQuant.FP8}
KV = {"bf16": KVDType.BF16, "fp8": KVDType.FP8}


def _limits(c: PlanCandidate) -> str:
    cfg = c.config
    parts = [f"mnt {cfg.prefill.max_num_tokens}"]
    if cfg.decode is not None:
        parts.append(f"decode mbs {cfg.decode.max_batch_size}")
    else:
        parts.append(f"mbs {cfg.prefill.max_batch_size}")
    return ", ".join(parts)


def _table(p: Plan, top: int) -> Table:
    table = Table(show_header=True, show_lines=True)
    for col in ("#", "configuration", "GPUs", "$/h", "goodput req/s", "req/s per $/h",
                "TTFT p90", "ITL p90", "why"):
        table.add_column(col)
    shown = list(p.ranked[:top]) + [c for c in p.simulated if not c.meets_slo][:3]
    for i, c in enumerate(shown, start=1):
        d = c.to_dict()
        table.add_row(
            str(i) if c.meets_slo else "x", f"{c.config.label()}\n{_limits(c)}",
            str(c.config.num_gpus), f"{c.cost_per_hour_usd:.2f}",
            f"{c.goodput_req_per_s:.2f}", f"{c.goodput_per_usd_hour:.3f}",
            f"{d['ttft_p90_ms']:.0f} ms" if d["ttft_p90_ms"] is not None else "-",
            f"{d['itl_p90_ms']:.1f} ms" if d["itl_p90_ms"] is not None else "-",
            "\n".join(c.reasons()))
    return table


@click.command("plan")
@click.option("--model", "model_ref", required=True,
              help="HF config.json, checkpoint dir or built-in model name.")
@click.option("--gpus", required=True, help="Comma-separated GPU types, e.g. h100-sxm,l40s.")
@click.option("--prices", type=click.Path(path_type=Path), help="YAML {gpu: usd_per_hour}.")
@click.option("--isl", type=click.IntRange(min=1), required=True, help="Prompt tokens.")
@click.option("--osl", type=click.IntRange(min=1), required=True, help="Output tokens.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Target requests per second (Poisson).")
@click.option("--ttft-p90", type=click.FloatRange(min=0, min_open=True), required=True,
              help="TTFT target at p90, ms.")
@click.option("--itl-p90", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Inter-token latency target at p90, ms.")
@click.option("--max-gpus", type=click.IntRange(min=1), help="At most this many GPUs.")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True),
              help="At most this many USD per hour.")
@click.option("--weights", type=click.Choice(list(WEIGHTS)), default="bf16", show_default=True)
@click.option("--kv-dtype", type=click.Choice(list(KV)), default="fp8", show_default=True)
@click.option("--same-node", is_flag=True, help="Pools share a node (NVLink between equal "
              "GPUs); default: the KV crosses a NIC.")
@click.option("--backend", type=click.Choice([b.value for b in ServingBackend]),
              default="trtllm", show_default=True, help="Whose calibrated factors to use.")
@click.option("--num-requests", type=click.IntRange(min=50), default=300, show_default=True,
              help="Requests per verifying simulation.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=8, show_default=True,
              help="Rows of the ranked table.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write the spec of the chosen disaggregated configuration here.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path),
              help="Pareto PNG (default: pdtrt-plan-pareto.png; --no-plot to skip).")
@click.option("--no-plot", is_flag=True, help="Write no plot.")
@json_option
def plan_cmd(model_ref: str, gpus: str, prices: Path | None, isl: int, osl: int, rate: float,
             ttft_p90: float, itl_p90: float, max_gpus: int | None, budget: float | None,
             weights: str, kv_dtype: str, same_node: bool, backend: str, num_requests: int,
             seed: int, top: int, output: Path | None, plot_path: Path | None, no_plot: bool,
             as_json: bool) -> None:
    """Find the configuration with the best goodput per dollar that meets the SLOs.

    Searches aggregated and disaggregated serving over GPU types per phase, TP per phase,
    instance counts and engine limits; screens with the performance model, verifies the
    cheapest survivors by simulation, ranks by goodput per $/h and says plainly when
    disaggregation does not pay. Writes a Pareto plot and, with -o, a spec for build/repo/serve.

    \b
    Example:
      pdtrt plan --model meta-llama/Meta-Llama-3.1-8B --gpus h100-sxm,l40s --isl 3000 \\
        --osl 500 --rate 4 --ttft-p90 1000 --itl-p90 30 --max-gpus 8 -o pdtrt.yaml
    """
    if max_gpus is not None and budget is not None:
        raise click.UsageError("give at most one of --max-gpus and --budget")
    catalog = load_catalog(load_prices(prices) if prices else None)
    names = [n.strip() for n in gpus.split(",") if n.strip()]
    if not names:
        raise PdtrtError("--gpus names no GPU", hint="e.g. --gpus h100-sxm,l40s")
    gpu_list = tuple(dict.fromkeys(catalog.get(n) for n in names))
    model = load_model_facts(model_ref)
    req = PlanRequest(
        model=model, gpus=gpu_list, isl=isl, osl=osl, rate_per_s=rate,
        slo=SloTarget(percentile=90, ttft_ms=ttft_p90, itl_ms=itl_p90),
        factors=load_factors(ServingBackend(backend)), weights=WEIGHTS[weights],
        kv_dtype=KV[kv_dtype], bounds=SearchBounds(max_gpus=max_gpus,
                                                    budget_usd_per_hour=budget),
        same_node=same_node, num_requests=num_requests, seed=seed)
    result = plan(req)
    written_spec = None
    if output is not None:
        path = Path(model_ref)
        text = spec_text(result, model_name=model.name,
                         model_path=str(path.resolve()) if path.exists() else None)
        write_atomic(output, text)
        load_deployment(output, catalog=catalog)  # the spec must validate as written
        written_spec = str(output)
    plot = None
    if not no_plot:
        from pdtrt.cli.plots import plot_pareto

        plot = plot_pareto(result.candidates, plot_path or Path("pdtrt-plan-pareto.png"),
                           title=f"{model.name}: ISL {isl}, OSL {osl}, {rate:g} req/s",
                           chosen=result.chosen)
    if as_json:
        emit_json({
            "verdict": result.verdict,
            "chosen": result.chosen.to_dict() if result.chosen else None,
            "ranked": [c.to_dict() for c in result.ranked],
            "num_candidates": len(result.candidates),
            "num_screened": sum(c.screen_ok for c in result.candidates),
            "num_simulated": len(result.simulated),
            "spec": written_spec, "spec_config": spec_candidate(result).config.label()
            if written_spec else None,
            "plot": str(plot) if plot else None,
        })
        return
    click.echo(f"{model.name}: ISL {isl}, OSL {osl}, {rate:g} req/s, SLO p90 TTFT "
               f"{ttft_p90:g} ms / ITL {itl_p90:g} ms; GPUs {', '.join(g.key for g in gpu_list)}")
    click.echo(f"searched {len(result.candidates)} configurations, "
               f"{sum(c.screen_ok for c in result.candidates)} passed the model's screen, "
               f"{len(result.simulated)} simulated, {len(result.ranked)} meet the SLOs")
    console().print(_table(result, top))
    click.echo(f"verdict: {result.verdict}")
    if written_spec:
        click.echo(f"wrote {written_spec} ({spec_candidate(result).config.label()})")
    if plot:
        click.echo(f"wrote {plot}")
