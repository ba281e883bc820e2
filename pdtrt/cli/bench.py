"""``pdtrt bench``: an LLM load test against a Triton server speaking the ensemble I/O."""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import click

from pdtrt.bench import COMPARED, ArrivalProcess, run_bench
from pdtrt.bench.options import DEFAULT_REQUESTS, BenchOptions, parse_rates, resolve_config
from pdtrt.bench.outputs import write_report
from pdtrt.bench.server_side import MetricsProbe
from pdtrt.bench.tokenizer_choice import choose_tokenizer
from pdtrt.cli.bench_render import progress_bar, render_report
from pdtrt.cli.infer import url_option
from pdtrt.cli.render import EXIT_EXPECTED_ERROR, EXIT_PARTLY_FAILED, emit_json, json_option
from pdtrt.client import LLMClient
from pdtrt.enums import Percentile
from pdtrt.errors import BenchError


@click.command("bench")
@url_option
@click.option("--model", default="ensemble", show_default=True,
              help="Model speaking the TensorRT-LLM ensemble I/O.")
@click.option("--compare", is_flag=True,
              help=f"Run {COMPARED[0]} and {COMPARED[1]} on the same schedule, side by side.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Open loop: requests per second.")
@click.option("--rates", "rates_text", metavar="R1,R2,...",
              help="Open loop sweep; reports the highest rate meeting the SLOs.")
@click.option("--arrival", type=click.Choice([p.value for p in ArrivalProcess]),
              default=ArrivalProcess.POISSON.value, show_default=True,
              help="Open-loop arrival process.")
@click.option("--concurrency", type=click.IntRange(min=1),
              help="Closed loop: concurrent users (the default loop, with 1 user).")
@click.option("--requests", "num_requests", type=click.IntRange(min=1),
              help=f"Measured requests per run (default {DEFAULT_REQUESTS} unless --duration).")
@click.option("--duration", "duration_s", type=click.FloatRange(min=0, min_open=True),
              help="Seconds to send measured requests for (each run).")
@click.option("--warmup", "num_warmup", type=click.IntRange(min=0), default=2,
              show_default=True, help="Warm-up requests per run, excluded from the results.")
@click.option("--isl", default=None, metavar="DIST",
              help="Input length in tokens: N, uniform:LOW:HIGH or normal:MEAN:STD "
              "(default: the spec's workload.isl, else 128).")
@click.option("--osl", default=None, metavar="DIST",
              help="Output length (max_tokens), same forms (default: workload.osl, else 32).")
@click.option("--dataset", type=click.Path(path_type=Path, dir_okay=False),
              help='A trace: JSONL, one {"prompt": ..., "max_tokens": ...} (or "isl", '
              '"osl") per line, cycled; sent on this command\'s schedule. With '
              '"conversation_id" (and optional "turn", "think_s") on its lines: multi-turn '
              'chats, each turn sent with the conversation so far once the previous answer '
              'and its think time are over (docs/bench.md).')
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(path_type=Path, file_okay=False),
              help="The deployment's tokenizer (a local directory): synthetic prompts are "
              "exactly --isl of its tokens and input tokens are counted with it. Default: "
              "the spec's tokenizer (--spec), else the one the server's preprocessing model "
              "names, when it exists here; else prompts are --isl words (said in one line).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the requests and arrival times.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Stream tokens (needed for TTFT/ITL of every token).")
@click.option("--ignore-eos", is_flag=True,
              help="Never stop at the end token: every request generates --osl tokens "
              "(sends the ensemble's end_id as -1; the model must declare it).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              default=60.0, show_default=True, help="Per-request timeout, seconds.")
@click.option("--spec", "spec_path", type=click.Path(path_type=Path, dir_okay=False),
              help="Deployment spec: SLOs, workload lengths and GPU cost ($/Mtok).")
@click.option("--slo-ttft-ms", type=click.FloatRange(min=0, min_open=True),
              help="TTFT target, ms (overrides the spec).")
@click.option("--slo-itl-ms", type=click.FloatRange(min=0, min_open=True),
              help="Per-request TPOT/ITL target, ms (overrides the spec).")
@click.option("--slo-percentile", type=click.Choice(["50", "90", "95", "99"]),
              help="Share of requests that must meet the SLOs, as a percentile (default 90).")
@click.option("--metrics-url", metavar="URL",
              help="Triton's metrics endpoint (http://HOST:PORT/metrics; `pdtrt serve` prints "
              "it): scraped around each run for the server-side breakdown -- the router's "
              "queue, prefill, KV transfer, decode, TTFT, TPOT and E2E per request, beside "
              "the client's numbers.")
@click.option("--output-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Where report.json, records CSVs and plots go (default pdtrt-bench-TIME/).")
@click.option("--plots/--no-plots", default=True, show_default=True, help="Write PNG plots.")
@json_option
def bench(url: str, model: str, compare: bool, rate: float | None, rates_text: str | None,
          arrival: str, concurrency: int | None, num_requests: int | None,
          duration_s: float | None, num_warmup: int, isl: str | None, osl: str | None,
          dataset: Path | None, tokenizer_dir: Path | None, seed: int, stream: bool,
          ignore_eos: bool, timeout_s: float,
          spec_path: Path | None, slo_ttft_ms: float | None, slo_itl_ms: float | None,
          slo_percentile: str | None, metrics_url: str | None, output_dir: Path | None,
          plots: bool, as_json: bool) -> None:
    """Load-test a Triton server: TTFT, ITL, TPOT, E2E, throughput, goodput, $/Mtok.

    \b
    Open loop:   --rate 2 (Poisson) or --rates 1,2,4 (sweep)
    Closed loop: --concurrency 8 (the default is 1 user)
    Compare:     --compare runs ensemble and ensemble_aggregated on one schedule
    Server side: --metrics-url http://HOST:8002/metrics adds the router's
                 per-phase breakdown (queue, prefill, KV transfer, decode)
    Results go to --output-dir: report.json, records-*.csv, ttft_cdf.png,
    itl_cdf.png, token_timeline.png (and sweep.png).
    """
    if rate is not None and rates_text is not None:
        raise BenchError("give --rate or --rates, not both")
    rates = (rate,) if rate is not None else parse_rates(rates_text) if rates_text else ()
    deployment = None
    if spec_path is not None:
        from pdtrt.spec.load import load_deployment

        deployment = load_deployment(spec_path)
    config = resolve_config(BenchOptions(
        models=COMPARED if compare else (model,), rates_per_s=rates,
        arrival=ArrivalProcess(arrival), concurrency=concurrency, num_requests=num_requests,
        duration_s=duration_s, num_warmup=num_warmup, isl=isl, osl=osl, dataset=dataset,
        seed=seed, stream=stream, ignore_eos=ignore_eos, timeout_s=timeout_s,
        slo_ttft_ms=slo_ttft_ms, slo_itl_ms=slo_itl_ms,
        slo_percentile=Percentile(int(slo_percentile)) if slo_percentile else None),
        deployment)
    out_dir = output_dir or Path(time.strftime("pdtrt-bench-%Y%m%d-%H%M%S"))
    with ExitStack() as stack:
        client = stack.enter_context(LLMClient(url))
        # --tokenizer / the spec's tokenizer need no server: a bad path fails before any request
        choice = choose_tokenizer(client, config.models, tokenizer_dir=tokenizer_dir,
                                  deployment=deployment)
        config = replace(config, workload=replace(config.workload, tokenizer=choice.prompts))
        if choice.note and not as_json:
            click.echo(f"note: {choice.note}", err=True)
        on_run = None if as_json else stack.enter_context(progress_bar())
        probe = MetricsProbe(metrics_url) if metrics_url else None
        report = replace(run_bench(client, config, on_run=on_run, probe=probe),
                         tokenizer=choice)
    files = write_report(report, out_dir, plots=plots)
    error = report.error()
    if as_json:
        emit_json({**report.to_dict(), "files": files.to_dict()})
        if error:
            click.get_current_context().exit(EXIT_EXPECTED_ERROR)
    else:
        render_report(report, files)
        if error:
            raise error
    if lost := report.failed_runs():  # the report is whole, but requests were lost: say so
        if not as_json:
            click.echo("warning: requests failed -- " + "; ".join(lost), err=True)
        click.get_current_context().exit(EXIT_PARTLY_FAILED)
