"""Write a :class:`~pdtrt.bench.bench.BenchReport` to a directory: ``report.json`` (config,
per-run summaries), ``records-<model>-<load>.csv`` per run, and the PNG plots."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pdtrt.bench.bench import BenchReport
from pdtrt.bench.plots import write_plots
from pdtrt.bench.records import write_csv

__all__ = ["ReportFiles", "write_report"]


@dataclass(frozen=True, kw_only=True)
class ReportFiles:
    json: Path
    csvs: tuple[Path, ...]
    plots: tuple[Path, ...]

    def to_dict(self) -> dict[str, object]:
        return {"json": str(self.json), "csv": [str(p) for p in self.csvs],
                "plots": [str(p) for p in self.plots]}


def write_report(report: BenchReport, out_dir: Path, *, plots: bool = True) -> ReportFiles:
    out_dir.mkdir(parents=True, exist_ok=True)
    csvs = tuple(write_csv(list(run.records), out_dir / f"records-{run.slug}.csv")
                 for run in report.runs)
    pngs = tuple(write_plots(report, out_dir)) if plots else ()
    json_path = out_dir / "report.json"
    data = report.to_dict()
    data["files"] = {"csv": [p.name for p in csvs], "plots": [p.name for p in pngs]}
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    return ReportFiles(json=json_path, csvs=csvs, plots=pngs)
