"""PNG plots of a benchmark report (matplotlib, Agg backend; nothing is shown on screen).

- ``ttft_cdf.png`` / ``itl_cdf.png``: empirical CDFs, one line per run, with the SLO target;
- ``token_timeline.png``: per request (y) its send (o), every token (|) and end (x) over time,
  one panel per run -- shows queueing, stalls and head-of-line blocking;
- ``sweep.png`` (``--rates``): output-token throughput and p50/p90 TTFT and TPOT against the
  offered rate, one line per model;
- ``ttft_phases.png`` (runs of a model that answers the server timing): the server's TTFT of
  the requests at p50/p90/p99, stacked by phase (:mod:`pdtrt.bench.ttft_phases`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pdtrt.bench.bench import BenchReport, RunResult
from pdtrt.bench.ttft_phases import BAR_PERCENTILES, request_at, timed
from pdtrt.client.timing import TTFT_PHASE_FIELDS
from pdtrt.enums import Percentile

__all__ = ["write_plots"]

MAX_TIMELINE_REQUESTS = 200


def _pyplot():
    # matplotlib 3.9 calls pyparsing APIs that pyparsing 3.3 deprecates, at import time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    return plt


def _cdf(ax, runs: Sequence[RunResult], samples, xlabel: str, target_ms: float | None) -> None:
    for run in runs:
        values = np.sort(np.asarray(samples(run), dtype=float))
        if values.size:
            ax.step(values, np.arange(1, values.size + 1) / values.size, where="post",
                    label=f"{run.label} (n={values.size})")
    if target_ms is not None:
        ax.axvline(target_ms, color="red", linestyle="--", label=f"SLO {target_ms:g} ms")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def _measured(run: RunResult):
    return [r for r in run.records if not r.warmup and r.ok]


def write_plots(report: BenchReport, out_dir: Path) -> list[Path]:
    """Write the plots of ``report`` into ``out_dir``; returns their paths."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    slo = report.config.slo

    fig, ax = plt.subplots(figsize=(8, 5))
    _cdf(ax, report.runs, lambda run: [r.ttft_s * 1e3 for r in _measured(run)
                                       if r.ttft_s is not None], "TTFT (ms)", slo.ttft_ms)
    ax.set_title("Time to first token, CDF")
    paths.append(_save(fig, out_dir / "ttft_cdf.png", plt))

    fig, ax = plt.subplots(figsize=(8, 5))
    _cdf(ax, report.runs, lambda run: [g * 1e3 for r in _measured(run) for g in r.itls_s],
         "inter-token latency (ms), every gap between consecutive tokens", slo.itl_ms)
    ax.set_title("Inter-token latency, CDF")
    paths.append(_save(fig, out_dir / "itl_cdf.png", plt))

    timeline_runs = [r for r in report.runs if r.rate_per_s == report.runs[0].rate_per_s]
    fig, axes = plt.subplots(len(timeline_runs), 1, figsize=(9, 3.2 * len(timeline_runs)),
                             squeeze=False, sharex=True)
    for ax, run in zip(axes[:, 0], timeline_runs, strict=True):
        records = [r for r in run.records if not r.warmup][:MAX_TIMELINE_REQUESTS]
        for y, rec in enumerate(records):
            color = "tab:blue" if rec.ok else "tab:red"
            ax.hlines(y, rec.send_s, rec.end_s, color=color, linewidth=0.6, alpha=0.5)
            ax.plot(rec.token_times_s, [y] * rec.output_tokens, "|", color=color,
                    markersize=3)
        ax.plot([r.send_s for r in records], range(len(records)), "o", color="green",
                markersize=2, label="send")
        ax.plot([r.end_s for r in records], range(len(records)), "x", color="black",
                markersize=2, label="end")
        ax.plot([], [], "|", color="tab:blue", label="token")
        ax.set_title(f"Token timeline: {run.label}", fontsize=10)
        ax.set_ylabel("request #")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[-1, 0].set_xlabel("time since the start of the measured run (s)")
    paths.append(_save(fig, out_dir / "token_timeline.png", plt))

    if report.is_sweep:
        fig, (ax_tp, ax_lat) = plt.subplots(1, 2, figsize=(12, 4.5))
        for model in report.models:
            runs = report.runs_of(model)
            rates = [r.rate_per_s for r in runs]
            ax_tp.plot(rates, [r.summary.output_tok_per_s for r in runs], "o-", label=model)
            for metric, style in (("ttft_ms", "o-"), ("tpot_ms", "s--")):
                for pct in (Percentile.P50, slo.percentile):
                    ax_lat.plot(rates, [getattr(r.summary, metric).at(pct) for r in runs],
                                style, label=f"{model} {metric[:-3].upper()} {pct.label}")
        ax_tp.set_xlabel("offered request rate (requests/s)")
        ax_tp.set_ylabel("output-token throughput (tokens/s)")
        ax_tp.set_title("Throughput vs rate")
        ax_lat.set_xlabel("offered request rate (requests/s)")
        ax_lat.set_ylabel("latency (ms)")
        ax_lat.set_title("TTFT and TPOT vs rate")
        for target, name in ((slo.ttft_ms, "TTFT"), (slo.itl_ms, "TPOT")):
            if target is not None:
                ax_lat.axhline(target, color="red", linestyle=":", linewidth=0.8,
                               label=f"{name} SLO {target:g} ms")
        for ax in (ax_tp, ax_lat):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        paths.append(_save(fig, out_dir / "sweep.png", plt))
    timed_runs = [run for run in report.runs if timed(run.records)]
    if timed_runs:
        paths.append(_ttft_phases(timed_runs, out_dir / "ttft_phases.png", plt))
    return paths


def _ttft_phases(runs: Sequence[RunResult], path: Path, plt) -> Path:
    """One bar per (run, percentile): the phases of the request at that percentile of the
    server's TTFT, stacked in request order."""
    labels, bars = [], []
    for run in runs:
        timings = timed(run.records)
        for pct in BAR_PERCENTILES:
            labels.append(f"{run.label}\n{pct.label}" if len(runs) > 1 else pct.label)
            bars.append(request_at(timings, pct).phases_ms)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(bars) + 2), 5))
    bottom = np.zeros(len(bars))
    for name in TTFT_PHASE_FIELDS:
        heights = np.array([bar[name] for bar in bars])
        ax.bar(range(len(bars)), heights, bottom=bottom, label=name.removesuffix("_ms"))
        bottom += heights
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylim(0, max(float(bottom.max()), 1e-3) * 1.12)
    ax.set_xticks(range(len(bars)), labels, fontsize=8)
    ax.set_ylabel("server TTFT (ms, router clock)")
    ax.set_title("Server TTFT by phase: the request at each percentile")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars
    return _save(fig, path, plt)


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
