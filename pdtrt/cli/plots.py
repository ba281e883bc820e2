"""PNG plots of simulations and plans (matplotlib, headless Agg backend).

Only the CLI calls this module, and only for an explicit ``--plot FILE``; the library's results
carry the data, these functions draw it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pdtrt.enums import ServingMode

if TYPE_CHECKING:
    from pdtrt.planner.search import PlanCandidate
    from pdtrt.sim.metrics import SimResult

__all__ = ["plot_pareto", "plot_simulation"]

_COLOURS = {ServingMode.AGGREGATED: "tab:red", ServingMode.DISAGGREGATED: "tab:blue"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(ax, values_ms: np.ndarray, label: str, colour: str) -> None:
    if values_ms.size == 0:
        return
    xs = np.sort(values_ms)
    ax.plot(xs, np.arange(1, xs.size + 1) / xs.size, label=label, color=colour)


def plot_simulation(results: Sequence[SimResult], path: Path, *, title: str) -> Path:
    """TTFT and per-request TPOT distributions (what the SLO judges, with its targets), and
    every inter-token gap over time (head-of-line blocking shows as spikes)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for res in results:
        colour = _COLOURS.get(res.mode, "tab:gray")
        _cdf(axes[0], res.ttft_s * 1e3, res.label, colour)
        _cdf(axes[1], res.tpot_s * 1e3, res.label, colour)
        step = max(1, res.itl_s.size // 20000)
        t0 = res.itl_time_s[0] if res.itl_time_s.size else 0.0
        axes[2].scatter(res.itl_time_s[::step] - t0, res.itl_s[::step] * 1e3, s=2,
                        color=colour, alpha=0.4, label=res.label)
    for ax, name in ((axes[0], "TTFT (ms)"), (axes[1], "TPOT per request (ms)")):
        ax.set_xlabel(name)
        ax.set_ylabel("share of requests")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    slo = results[0].slo if results else None
    if slo is not None and slo.ttft_ms:
        axes[0].axvline(slo.ttft_ms, color="k", ls="--", lw=1, label=f"SLO {slo.ttft_ms:g} ms")
    if slo is not None and slo.itl_ms:
        axes[1].axvline(slo.itl_ms, color="k", ls="--", lw=1, label=f"SLO {slo.itl_ms:g} ms")
    axes[2].set_xlabel("time (s)")
    axes[2].set_ylabel("inter-token latency (ms)")
    axes[2].set_yscale("log")
    axes[2].grid(alpha=0.3)
    for ax in axes:
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_pareto(candidates: Sequence[PlanCandidate], path: Path, *, title: str,
                chosen: PlanCandidate | None = None) -> Path:
    """Output tokens/s per dollar-hour against tokens/s per user at the target rate.

    Large dots pass the model's screen (and, when simulated, met the SLOs), small ones do
    not, crosses failed the SLOs in simulation; the frontier runs over the large dots.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    pts = [(c, c.user_tok_per_s, c.tok_per_s_per_usd_hour) for c in candidates
           if c.user_tok_per_s > 0]

    def viable(c: PlanCandidate) -> bool:
        return c.meets_slo if c.sim is not None else c.screen_ok

    for mode, colour in _COLOURS.items():
        mine = [(c, x, y) for c, x, y in pts if c.config.mode is mode]
        for kind, sel, marker, size in (
                ("passes", [p for p in mine if viable(p[0])], "o", 30),
                ("fails screen", [p for p in mine if not viable(p[0]) and p[0].sim is None],
                 "o", 8),
                ("fails in simulation", [p for p in mine if p[0].sim is not None
                                         and not p[0].meets_slo], "x", 40)):
            if sel:
                ax.scatter([p[1] for p in sel], [p[2] for p in sel], s=size, marker=marker,
                           color=colour, alpha=0.7, label=f"{mode}: {kind}")
    frontier, best_y = [], -1.0
    for _c, x, y in sorted((p for p in pts if viable(p[0])), key=lambda p: -p[1]):
        if y > best_y:
            frontier.append((x, y))
            best_y = y
    if frontier:
        fx, fy = zip(*frontier, strict=True)
        ax.plot(fx, fy, color="k", lw=1, ls="--", label="Pareto frontier")
    if chosen is not None:
        ax.scatter([chosen.user_tok_per_s], [chosen.tok_per_s_per_usd_hour], marker="*",
                   s=250, color="gold", edgecolor="k", zorder=5, label="chosen")
    ax.set_xlabel("tokens/s per user (1 / TPOT)")
    ax.set_ylabel("output tokens/s per $/h (at the target rate)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
