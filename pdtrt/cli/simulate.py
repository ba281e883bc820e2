"""``pdtrt simulate``: aggregated vs disaggregated serving of a spec, side by side."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from pdtrt.cli.render import console, emit_json, json_option
from pdtrt.enums import ServingBackend, ServingMode
from pdtrt.errors import WorkloadError
from pdtrt.perf.scheduling import CapacityPolicy
from pdtrt.sim.from_spec import ROUTING, SimOverrides, sim_configs
from pdtrt.sim.metrics import SimResult
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.simulator import simulate
from pdtrt.sim.workload import SimWorkload
from pdtrt.spec.load import load_deployment
from pdtrt.workload.arrivals import ArrivalProcess
from pdtrt.workload.lengths import LengthDist, parse_length

# the router's spellings (pdtrt.enums.Routing) of the same policies
_ROUTING = {str(k): v for k, v in ROUTING.items()}
_MODES = {"both": (ServingMode.AGGREGATED, ServingMode.DISAGGREGATED),
          "aggregated": (ServingMode.AGGREGATED,), "disaggregated": (ServingMode.DISAGGREGATED,)}


class _Length(click.ParamType):
    """``N``, ``uniform:LOW:HIGH`` or ``normal:MEAN:STD`` (as ``pdtrt bench``)."""

    name = "DIST"

    def convert(self, value, param, ctx) -> LengthDist:
        if isinstance(value, LengthDist):
            return value
        try:
            return parse_length(value)
        except WorkloadError as exc:
            self.fail(exc.message, param, ctx)


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:,.1f}{unit}"


def _rows(res: SimResult) -> dict[str, str]:
    d = res.to_dict()
    t, i, p, e = d["ttft_ms"], d["itl_ms"], d["tpot_ms"], d["e2e_ms"]
    slo = d["slo"]
    usd = d["usd_per_mtok"]
    return {
        "TTFT mean / p50": f"{_fmt(t['mean'])} / {_fmt(t['p50'])} ms",
        "TTFT p90 / p99": f"{_fmt(t['p90'])} / {_fmt(t['p99'])} ms",
        "ITL p50 / p90": f"{_fmt(i['p50'])} / {_fmt(i['p90'])} ms",
        "ITL p99": f"{_fmt(i['p99'])} ms",
        "TPOT mean / p90": f"{_fmt(p['mean'])} / {_fmt(p['p90'])} ms",
        "E2E p50 / p90": f"{_fmt(e['p50'])} / {_fmt(e['p90'])} ms",
        "throughput": f"{d['output_tok_per_s']:,.0f} tok/s, {d['req_per_s']:.2f} req/s",
        f"SLO attainment (need {slo['percentile']}%)": f"{slo['attainment']:.1%}",
        "SLO met": "yes" if slo["met"] else ("no (backlog growing)" if slo["backlog_growing"]
                                              else "no"),
        "goodput": f"{d['goodput_req_per_s']:.2f} req/s",
        "utilisation": ", ".join(f"{k} {v:.0%}" for k, v in d["utilisation"].items()),
        "GPUs, $/h": f"{d['num_gpus']}, ${d['cost_per_hour_usd']:.2f}",
        "$ per M output tok": "-" if usd is None else f"${usd:.3f}",
        "unfinished": str(d["num_unfinished"]),
        **({"prompt tokens from cache": f"{d['cached_prompt_tokens']:,} of "
            f"{d['prompt_tokens']:,}"} if d.get("cached_prompt_tokens") else {}),
        **(_reuse_rows(d["reuse"]) if "reuse" in d else {}),
    }


def _reuse_rows(r: dict) -> dict[str, str]:
    first, later = r["ttft_first_turn_ms"], r["ttft_later_turns_ms"]
    return {
        "prompt tokens computed": f"{r['computed_prompt_tokens']:,}",
        "KV transferred": f"{r['kv_transfer_bytes'] / 1e9:,.2f} GB",
        "prefills local / remote": f"{r['num_local_prefills']} / {r['num_remote_prefills']}"
        + (f" ({r['num_local_queued']} local as the prefill pool was queued)"
           if r["num_local_queued"] else ""),
        "TTFT p50 / p90, turn 1": f"{_fmt(first['p50'])} / {_fmt(first['p90'])} ms",
        "TTFT p50 / p90, later turns": f"{_fmt(later['p50'])} / {_fmt(later['p90'])} ms",
    }


def _lengths(w: SimWorkload) -> str:
    if w.trace:
        return f"lengths from a trace of {len(w.trace)}"
    return f"ISL {w.isl}, OSL {w.osl}"


@click.command("simulate")
@click.argument("spec_file", type=click.Path(path_type=Path))
@click.option("--mode", type=click.Choice(list(_MODES)), default="both", show_default=True,
              help="Which deployments to simulate.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Open loop: requests per second (overrides the spec's workload).")
@click.option("--concurrency", type=click.IntRange(min=1), help="Closed loop: clients.")
@click.option("--arrival", type=click.Choice([p.value for p in ArrivalProcess]),
              default=ArrivalProcess.POISSON.value, show_default=True,
              help="Open-loop arrival process (first request at t = 0, as pdtrt bench).")
@click.option("--trace", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="JSONL (or CSV) trace: replayed at its arrival_s without --rate / "
              "--concurrency; otherwise its lengths, cycled.")
@click.option("--isl", type=_Length(), help="Prompt tokens: N, uniform:LOW:HIGH or "
              "normal:MEAN:STD (default: the spec's workload.isl).")
@click.option("--osl", type=_Length(), help="Output tokens, same forms (default: the spec's "
              "workload.osl).")
@click.option("--num-requests", type=click.IntRange(min=1), default=500, show_default=True,
              help="Requests to simulate (replaying a trace: at most its first N).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the arrival and length draws (the same draws as pdtrt bench).")
@click.option("--agg-instances", type=click.IntRange(min=1),
              help="Aggregated baseline instances (default: as many GPUs as the spec).")
@click.option("--prefill-instances", type=click.IntRange(min=1), help="Override the spec.")
@click.option("--decode-instances", type=click.IntRange(min=1), help="Override the spec.")
@click.option("--batch-policy", type=click.Choice([b.value for b in BatchPolicy]),
              default="chunked", show_default=True)
@click.option("--routing", type=click.Choice([*(r.value for r in RoutingPolicy), *_ROUTING]),
              help="How a replica is chosen (least_load / round_robin / kv_aware: the "
              "router's spellings). kv-aware: least net-new prompt tokens there + outstanding "
              "tokens, for entry and decode replicas. Default: the spec's router.routing.")
@click.option("--backend", type=click.Choice([b.value for b in ServingBackend]),
              default="trtllm", show_default=True, help="Whose calibrated factors to use.")
@click.option("--factors", "factors_file", type=click.Path(path_type=Path, exists=True),
              help="A factors file written by scripts/calibrate.py.")
@click.option("--shared-prefix", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="TOKENS", help="Every prompt starts with this many shared tokens (a "
              "system prompt); an engine with KV block reuse computes them once per instance. "
              "0: no reuse modelled.")
@click.option("--turns", type=click.IntRange(min=1), default=1, show_default=True,
              help="Turns per conversation: turn k's prompt is the conversation so far plus "
              "new tokens; arrivals start conversations.")
@click.option("--think-s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Seconds from a turn's last token to the next turn's send.")
@click.option("--followup-isl", type=_Length(), help="New prompt tokens of turns after the "
              "first, same forms as --isl (default: --isl).")
@click.option("--max-local-prefill-tokens", type=click.IntRange(min=0), metavar="TOKENS",
              help="Conditional disaggregation: a request whose prompt less what its decode "
              "instance holds is at most TOKENS is prefilled there (no prefill, no KV "
              "transfer). 0: off. Default: the spec's router.max_local_prefill_tokens.")
@click.option("--max-prefill-queue-depth", type=click.FloatRange(min=0), metavar="REQUESTS",
              help="Conditional disaggregation: while even the least loaded prefill instance "
              "holds this many requests, a prompt the decode engine takes in one step is "
              "prefilled there instead. 0: off. Default: the spec's "
              "router.max_prefill_queue_depth.")
@click.option("--capacity-policy", type=click.Choice([p.value for p in CapacityPolicy]),
              default=CapacityPolicy.GUARANTEED_NO_EVICT.value, show_default=True,
              help="TensorRT-LLM capacity scheduler: what KV admission reserves "
                   "(max-utilization pauses and re-prefills when the cache fills).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Write a PNG of the TTFT/ITL distributions and ITL over time here.")
@json_option
def simulate_cmd(spec_file: Path, mode: str, rate: float | None, concurrency: int | None,
                 arrival: str, trace: Path | None, isl: LengthDist | None,
                 osl: LengthDist | None, num_requests: int, seed: int,
                 agg_instances: int | None, prefill_instances: int | None,
                 decode_instances: int | None, batch_policy: str, routing: str | None, backend: str,
                 factors_file: Path | None, shared_prefix: int, turns: int, think_s: float,
                 followup_isl: LengthDist | None, max_local_prefill_tokens: int | None,
                 max_prefill_queue_depth: float | None, capacity_policy: str,
                 plot_path: Path | None, as_json: bool) -> None:
    """Simulate SPEC_FILE's deployment and its aggregated baseline (discrete events).

    Arrivals, length distributions, continuous batching with max_batch_size /
    max_num_tokens, chunked prefill, prefill queueing, KV-transfer queueing on the link and
    decode batching -> TTFT / ITL / E2E percentiles, SLO attainment, goodput (the
    definitions of pdtrt bench), utilisation, cost per million tokens; a PNG with --plot.
    Deterministic for a --seed.
    """
    if rate is not None and concurrency is not None:
        raise click.UsageError("give at most one of --rate and --concurrency")
    dep = load_deployment(spec_file)
    overrides = SimOverrides(
        modes=_MODES[mode], rate_per_s=rate, concurrency=concurrency,
        process=ArrivalProcess(arrival), trace=trace, isl=isl, osl=osl,
        num_requests=num_requests, seed=seed, agg_instances=agg_instances,
        prefill_instances=prefill_instances, decode_instances=decode_instances,
        batch_policy=BatchPolicy(batch_policy),
        routing=(_ROUTING.get(routing) or RoutingPolicy(routing)) if routing else None,
        backend=ServingBackend(backend), factors_file=factors_file,
        shared_prefix=shared_prefix, turns=turns, think_s=think_s, followup_isl=followup_isl,
        max_local_prefill_tokens=max_local_prefill_tokens,
        max_prefill_queue_depth=max_prefill_queue_depth,
        capacity_policy=CapacityPolicy(capacity_policy))
    configs = sim_configs(dep, overrides)
    results = [simulate(c) for c in configs]
    if plot_path is not None:
        from pdtrt.cli.plots import plot_simulation

        labels = " vs ".join(r.label for r in results)
        plot_simulation(results, plot_path, title=f"{dep.spec.name}: {labels}")
    if as_json:
        emit_json({"spec": str(spec_file), "results": [r.to_dict() for r in results],
                   "plot": str(plot_path) if plot_path else None})
        return
    wl = configs[0].workload
    click.echo(f"{dep.spec.name}: {_lengths(wl)}, {wl.describe()}, "
               f"{results[0].num_requests} requests, seed {seed}")
    table = Table(show_header=True)
    table.add_column("metric")
    rows = [_rows(r) for r in results]
    for res in results:
        table.add_column(res.label)
    for key in rows[0]:
        table.add_row(key, *(r[key] for r in rows))
    console().print(table)
    if plot_path is not None:
        click.echo(f"wrote {plot_path}")
