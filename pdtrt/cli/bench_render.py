"""Rendering of ``pdtrt bench``: the rich progress bar and the console tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdtrt.bench import BenchReport, RunResult, Summary
from pdtrt.bench.outputs import ReportFiles
from pdtrt.bench.records import SERVER_TIMING_FIELDS
from pdtrt.cli.render import console

OnRun = Callable[[str, int | None], Callable[[int, int | None], None]]


@contextmanager
def progress_bar() -> Iterator[OnRun]:
    """``on_run(label, total)`` for :func:`pdtrt.bench.run_bench`; drawn on stderr when it is
    a terminal, silent otherwise."""
    err = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, disable=not err.is_terminal,
                        transient=False)

    def on_run(label: str, total: int | None):
        task = progress.add_task(label, total=total)
        return lambda done, _total: progress.update(task, completed=done)

    with progress:
        yield on_run


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _server_side(run: RunResult) -> Table | str:
    """The router's histograms over ``run``: one row per family (ms, or tokens)."""
    server = run.server
    assert server is not None
    if not server.families:
        return f"{run.label}: no server-side breakdown: {server.note}"
    table = Table(title=f"server side, {run.label} (router histograms; quantiles from "
                  "buckets)")
    for col in ("per request", "count", "mean", "p50", "p90", "p99"):
        table.add_column(col, justify="left" if col == "per request" else "right")
    for f in server.families:
        scale, unit = (1e3, "ms") if f.unit == "seconds" else (1.0, "tokens")
        cells = ["-" if v is None else f"{v * scale:.1f}" for v in (f.mean, f.p50, f.p90, f.p99)]
        table.add_row(f"{f.label} ({unit})", str(f.count), *cells)
    return table


def _phase_value(s: Summary, column: str, stat: str) -> float | None:
    return None if s.ttft_phases_ms is None else getattr(s.ttft_phases_ms[column], stat)


def _rows(slo_pct: int, *, turns: bool = False, phases: bool = False
          ) -> list[tuple[str, Callable[[Summary], float | None], str]]:
    rows: list[tuple[str, Callable[[Summary], float | None], str]] = [
        ("requests ok", lambda s: s.num_ok, "{:.0f}"),
        ("errors", lambda s: s.num_errors, "{:.0f}"),
        ("output tokens (counted)", lambda s: s.output_tokens, "{:.0f}"),
        ("output tokens (requested)", lambda s: s.requested_tokens, "{:.0f}"),
        ("window (s)", lambda s: s.window_s, "{:.2f}"),
        ("requests/s", lambda s: s.request_per_s, "{:.2f}"),
        ("output tokens/s", lambda s: s.output_tok_per_s, "{:.1f}"),
    ]
    for metric, label in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("tpot_ms", "TPOT"),
                          ("e2e_ms", "E2E")):
        for stat in ("mean", "p50", "p90", "p95", "p99"):
            rows.append((f"{label} {stat} (ms)",
                         lambda s, m=metric, st=stat: getattr(getattr(s, m), st), "{:.1f}"))
    if turns:  # a run of conversations: follow-up turns carry the conversation so far
        for metric, label in (("ttft_first_turn_ms", "TTFT first turns"),
                              ("ttft_later_turns_ms", "TTFT later turns")):
            for stat in ("p50", "p90"):
                rows.append((f"{label} {stat} (ms)",
                             lambda s, m=metric, st=stat: getattr(getattr(s, m), st, None)
                             if getattr(s, m) is not None else None, "{:.1f}"))
    if phases:  # the server's own TTFT and the five phases that sum to it (router clock)
        for column in SERVER_TIMING_FIELDS:
            name = column.removeprefix("server_").removesuffix("_ms")
            for stat in ("p50", "p90", "p99"):
                rows.append((f"server {name} {stat} (ms)",
                             lambda s, c=column, st=stat: _phase_value(s, c, st), "{:.1f}"))
    rows += [
        ("goodput (requests/s)", lambda s: s.goodput_req_per_s, "{:.2f}"),
        (f"SLO attainment (need {slo_pct}%)",
         lambda s: None if s.slo_attainment is None else 100 * s.slo_attainment, "{:.0f}%"),
        ("$/M output tokens", lambda s: s.cost_per_mtok_usd, "{:.2f}"),
        ("send lag p99 (ms)", lambda s: s.lag_ms.p99, "{:.1f}"),
    ]
    return rows


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _side_by_side(report: BenchReport) -> Table:
    runs = report.runs
    table = Table(title="pdtrt bench (client-side times, monotonic clock)")
    table.add_column("metric")
    for run in runs:
        table.add_column(run.label, justify="right")
    if len(runs) == 2:
        table.add_column(f"{runs[0].model} / {runs[1].model}", justify="right")
    turns = any(run.summary.ttft_first_turn_ms is not None for run in runs)
    phases = any(run.summary.ttft_phases_ms is not None for run in runs)
    for name, get, fmt in _rows(report.config.slo.percentile, turns=turns, phases=phases):
        values = [get(run.summary) for run in runs]
        cells = [_fmt(v, fmt) for v in values]
        if len(runs) == 2:
            a, b = values
            cells.append("-" if a is None or b is None or b == 0 else f"{a / b:.2f}x")
        table.add_row(name, *cells)
    return table


def _sweep(report: BenchReport, model: str) -> Table:
    pct = report.config.slo.percentile
    table = Table(title=f"sweep: {model}")
    for col in ("rate/s", "ok", "errors", "tokens/s", "TTFT p50", f"TTFT p{pct}", "TPOT p50",
                f"TPOT p{pct}", "goodput/s", "SLO met"):
        table.add_column(col, justify="right")
    for run in report.runs_of(model):
        s = run.summary
        met = "-" if s.meets_slo is None else ("yes" if s.meets_slo else "no")
        table.add_row(f"{run.rate_per_s:g}", str(s.num_ok), str(s.num_errors),
                      f"{s.output_tok_per_s:.1f}", _ms(s.ttft_ms.p50), _ms(s.ttft_ms.at(pct)),
                      _ms(s.tpot_ms.p50), _ms(s.tpot_ms.at(pct)),
                      _fmt(s.goodput_req_per_s, "{:.2f}"), met)
    return table


def render_report(report: BenchReport, files: ReportFiles) -> None:
    out = console()
    slo = report.config.slo
    if report.is_sweep:
        for model in report.models:
            out.print(_sweep(report, model))
            best = report.best_rate_per_s(model)
            if not slo.any:
                verdict = "no SLO given (--slo-ttft-ms / --slo-itl-ms / --spec)"
            else:
                verdict = "none" if best is None else f"{best:g} requests/s"
            click.echo(f"{model}: highest rate meeting the SLOs (p{slo.percentile}: TTFT <= "
                       f"{_ms(slo.ttft_ms)} ms, TPOT <= {_ms(slo.itl_ms)} ms): {verdict}")
    else:
        out.print(_side_by_side(report))
    for run in report.runs:
        if run.server is not None:
            out.print(_server_side(run))
    for run in report.runs:
        failures = run.failures
        if failures.num_failed:
            click.echo(f"{run.label}: {failures.describe()}; most common: "
                       f"{failures.most_common_error}")
    unit = report.config.workload.length_unit
    click.echo(f"input lengths in {unit}" + (
        "; pass --tokenizer DIR to count the server's tokens" if unit == "words" else ""))
    click.echo(f"report: {files.json}")
    for path in (*files.csvs, *files.plots):
        click.echo(f"  {path}")
