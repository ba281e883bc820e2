"""``pdtrt plan``: search GPU types, TP, instance counts and engine limits for goodput per $.

The library resolves the flags (:func:`pdtrt.planner.request.resolve_request`), plans, writes
the spec and gives the JSON (:meth:`pdtrt.planner.search.Plan.to_dict`); this module renders.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from pdtrt.cli.render import console, emit_json, json_option
from pdtrt.enums import ServingBackend
from pdtrt.planner.request import KV_DTYPES, WEIGHTS, resolve_request
from pdtrt.planner.search import Plan, PlanCandidate, plan
from pdtrt.planner.spec_writer import write_spec


def _limits(c: PlanCandidate) -> str:
    cfg = c.config
    parts = [f"mnt {cfg.prefill.max_num_tokens}"]
    if cfg.decode is not None:
        parts.append(f"decode mbs {cfg.decode.max_batch_size}")
    else:
        parts.append(f"mbs {cfg.prefill.max_batch_size}")
    return ", ".join(parts)


def _ms(value: float | None, fmt: str) -> str:
    return "-" if value is None else f"{value:{fmt}} ms"


def _table(p: Plan, top: int) -> Table:
    pct = p.request.slo.percentile.label
    table = Table(show_header=True, show_lines=True)
    for col in ("#", "configuration", "GPUs", "$/h", "goodput req/s", "req/s per $/h",
                f"TTFT {pct}", f"TPOT {pct}", "why"):
        table.add_column(col)
    shown = list(p.ranked[:top]) + [c for c in p.simulated if not c.meets_slo][:3]
    for i, c in enumerate(shown, start=1):
        d = c.to_dict()
        table.add_row(
            str(i) if c.meets_slo else "x", f"{c.label()}\n{_limits(c)}",
            str(c.num_gpus), f"{c.cost_per_hour_usd:.2f}",
            f"{c.goodput_req_per_s:.2f}", f"{c.goodput_per_usd_hour:.3f}",
            _ms(d["ttft_ms_at_slo"], ".0f"), _ms(d["tpot_ms_at_slo"], ".1f"),
            "\n".join(c.reasons()))
    return table


def _render_owned(result: Plan) -> None:
    s = result.owned_summary()
    chosen = result.chosen
    if chosen is None or chosen.fleet_use is None:
        click.echo("owned cards: no configuration meets the SLOs")
        return

    def mtok(value: object) -> str:
        return "-" if value is None else f"${value:.3f}"

    click.echo(f"cards: {chosen.fleet_use.describe()} -- ${chosen.cost_per_hour_usd:.2f}/h "
               f"(power {result.request.fleet.power_price_usd_per_kwh:g} $/kWh at board "
               f"power), {mtok(s['usd_per_mtok'])} per million output tokens")
    click.echo(f"without the owned cards: {s['rented_config'] or 'nothing meets the SLOs'}, "
               f"{mtok(s['rented_usd_per_mtok'])} per million output tokens (all rented)")


def _render_mixed(result: Plan) -> None:
    s = result.mixed_summary()

    def line(d: object) -> str:
        if not isinstance(d, dict):
            return "none meets the SLOs"
        mtok = "-" if d["usd_per_mtok"] is None else f"${d['usd_per_mtok']:.3f}"
        return f"{d['config']}, ${d['cost_per_hour_usd']:.2f}/h, {mtok} per million output tokens"

    pays = s["mixed_pays"]
    verdict = ("nothing to compare" if pays is None else "the mixed pool pays" if pays
               else "a single-type pool is cheaper")
    click.echo(f"mixed decode pool (kv_capacity routing): {line(s['mixed'])}; best "
               f"single-type decode pool: {line(s['single_type'])} -- {verdict}")


def _render(result: Plan, top: int, spec: PlanCandidate | None, output: Path | None,
            plot_path: Path | None) -> None:
    req = result.request
    click.echo(f"{req.model.name}: ISL {req.isl}, OSL {req.osl}, {req.rate_per_s:g} req/s, "
               f"SLO {req.slo.percentile.label} TTFT {req.slo.ttft_ms:g} ms / TPOT "
               f"{req.slo.itl_ms:g} ms; GPUs {', '.join(g.key for g in req.gpus)}")
    click.echo(f"searched {len(result.candidates)} configurations, {result.num_screened} "
               f"passed the model's screen, {len(result.simulated)} simulated, "
               f"{len(result.ranked)} meet the SLOs")
    console().print(_table(result, top))
    click.echo(f"verdict: {result.verdict}")
    if req.fleet is not None:
        _render_owned(result)
    if any(c.extra_decode for c in result.candidates):
        _render_mixed(result)
    if result.routing is not None:
        r = result.routing
        kv, ll = r.runs["kv_aware"], r.runs["least_load"]
        click.echo(
            f"KV-aware routing on {r.config}: computes {kv.computed_prompt_tokens:,} of "
            f"{kv.prompt_tokens:,} prompt tokens vs {ll.computed_prompt_tokens:,} with "
            f"least_load ({r.computed_saved_share:.0%} fewer); TTFT p50 "
            f"{_ms(kv.ttft_p50_ms, '.0f')} vs {_ms(ll.ttft_p50_ms, '.0f')}; goodput "
            f"{kv.goodput_req_per_s:.2f} vs {ll.goodput_req_per_s:.2f} req/s"
            + ("" if r.has_choice else " (one replica per pool: the routing has no choice)"))
    if result.local_prefill is not None:
        click.echo(f"conditional disaggregation on {result.local_prefill.config}: "
                   f"max_local_prefill_tokens {result.local_prefill.chosen}, "
                   f"max_prefill_queue_depth {result.local_prefill.chosen_queue_depth:g} "
                   f"({result.local_prefill.why})")
    if spec is not None:
        click.echo(f"wrote {output} ({spec.label()})")
    if plot_path is not None:
        click.echo(f"wrote {plot_path}")


@click.command("plan")
@click.option("--model", "model_ref", required=True,
              help="HF config.json, checkpoint dir or built-in model name.")
@click.option("--gpus", help="Comma-separated GPU types to rent, e.g. h100-sxm,l40s "
              "(required unless --have names the GPUs).")
@click.option("--have", metavar="TYPE:N,...", help="GPUs you own, e.g. l40s:8,h100-sxm:2: they "
              "cost their board power (--power-price), only cards beyond them are rented.")
@click.option("--power-price", type=float, metavar="USD_PER_KWH",
              help="Electricity price for owned cards (catalog board power), USD per kWh.")
@click.option("--prices", type=click.Path(path_type=Path), help="YAML {gpu: usd_per_hour}.")
@click.option("--isl", type=click.IntRange(min=1), required=True, help="Prompt tokens.")
@click.option("--osl", type=click.IntRange(min=1), required=True, help="Output tokens.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Target requests per second (Poisson).")
@click.option("--ttft-p90", type=click.FloatRange(min=0, min_open=True), required=True,
              help="TTFT target, ms, that 90% of requests must meet.")
@click.option("--itl-p90", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Per-request TPOT (mean inter-token latency) target, ms, that 90% of "
              "requests must meet.")
@click.option("--max-gpus", metavar="N|TYPE:N,...", help="At most this many GPUs, in all "
              "(8) or per type, owned and rented together (h100-sxm:4,l40s:8).")
@click.option("--budget", type=click.FloatRange(min=0, min_open=True),
              help="At most this many USD per hour.")
@click.option("--weights", type=click.Choice(list(WEIGHTS)), default="bf16", show_default=True)
@click.option("--kv-dtype", type=click.Choice(list(KV_DTYPES)), default="fp8",
              show_default=True)
@click.option("--same-node", is_flag=True, help="Pools share a node (NVLink between equal "
              "GPUs); default: the KV crosses a NIC.")
@click.option("--backend", type=click.Choice([b.value for b in ServingBackend]),
              default="trtllm", show_default=True, help="Whose calibrated factors to use.")
@click.option("--shared-prefix", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="TOKENS", help="Chat workload: every conversation's first prompt starts "
              "with this many shared tokens (a system prompt). With it or --turns the plan "
              "assumes KV block reuse and kv_aware routing, and reports what they buy.")
@click.option("--turns", type=click.IntRange(min=1), default=1, show_default=True,
              help="Chat workload: requests per conversation; turn k's prompt is the "
              "conversation so far plus --followup-isl new tokens. --rate still counts "
              "requests.")
@click.option("--think-s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Chat workload: seconds from a turn's last token to the next turn.")
@click.option("--followup-isl", type=click.IntRange(min=1),
              help="Chat workload: new prompt tokens of turns after the first (default: "
              "--isl).")
@click.option("--num-requests", type=click.IntRange(min=50), default=300, show_default=True,
              help="Requests per verifying simulation.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--top", type=click.IntRange(min=1), default=8, show_default=True,
              help="Rows of the ranked table.")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Write the spec of the chosen disaggregated configuration here.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write a Pareto PNG of the searched configurations here.")
@json_option
def plan_cmd(model_ref: str, gpus: str | None, have: str | None, power_price: float | None,
             prices: Path | None, isl: int, osl: int, rate: float,
             ttft_p90: float, itl_p90: float, max_gpus: str | None, budget: float | None,
             weights: str, kv_dtype: str, same_node: bool, backend: str, shared_prefix: int,
             turns: int, think_s: float, followup_isl: int | None, num_requests: int,
             seed: int, top: int, output: Path | None, plot_path: Path | None,
             as_json: bool) -> None:
    """Find the configuration with the best goodput per dollar that meets the SLOs.

    Searches aggregated and disaggregated serving over GPU types per phase, TP per phase,
    instance counts and engine limits; screens with the performance model, verifies the
    cheapest survivors by simulation, ranks by goodput per $/h and says plainly when
    disaggregation does not pay. With -o writes a spec for build/repo/serve; with --plot a
    Pareto PNG. A chat workload (--shared-prefix, --turns) is planned with KV block reuse and
    kv_aware routing; the plan says what they save against least_load routing, and the spec
    gets conditional disaggregation's threshold from simulation.

    \b
    Example:
      pdtrt plan --model meta-llama/Meta-Llama-3.1-8B --gpus h100-sxm,l40s --isl 3000 \\
        --osl 500 --rate 4 --ttft-p90 1000 --itl-p90 30 --max-gpus 8 -o pdtrt.yaml
      pdtrt plan --model meta-llama/Meta-Llama-3.1-8B --have l40s:8 --gpus h100-sxm \\
        --power-price 0.15 --isl 3000 --osl 500 --rate 4 --ttft-p90 1000 --itl-p90 30
      pdtrt plan --model meta-llama/Meta-Llama-3.1-8B --gpus h100-sxm,l40s --isl 1200 \\
        --osl 200 --shared-prefix 1000 --turns 6 --followup-isl 100 --think-s 5 \\
        --rate 8 --ttft-p90 500 --itl-p90 30 --max-gpus 8
    """
    req = resolve_request(
        model_ref=model_ref, gpus=gpus, prices=prices, isl=isl, osl=osl, rate_per_s=rate,
        ttft_p90_ms=ttft_p90, itl_p90_ms=itl_p90, max_gpus=max_gpus,
        budget_usd_per_hour=budget, weights=WEIGHTS[weights], kv_dtype=KV_DTYPES[kv_dtype],
        same_node=same_node, backend=ServingBackend(backend), num_requests=num_requests,
        seed=seed, shared_prefix=shared_prefix, turns=turns, think_s=think_s,
        followup_isl=followup_isl, have=have, power_price=power_price)
    result = plan(req)
    spec = write_spec(result, output) if output is not None else None
    if plot_path is not None:
        from pdtrt.cli.plots import plot_pareto

        plot_pareto(result.candidates, plot_path,
                    title=f"{req.model.name}: ISL {isl}, OSL {osl}, {rate:g} req/s",
                    chosen=result.chosen)
    if as_json:
        emit_json({**result.to_dict(), "spec": str(output) if spec else None,
                   "spec_config": spec.label() if spec else None,
                   "plot": str(plot_path) if plot_path else None})
        return
    _render(result, top, spec, output, plot_path)
