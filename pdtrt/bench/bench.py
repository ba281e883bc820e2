"""``run_bench``: a whole benchmark -- one run, a ``--compare`` of models on the same
schedule, or a ``--rates`` sweep -- as a typed :class:`BenchReport`.

Every run of one benchmark sends the same requests (the workload is seeded per request) and,
in open loop, at the same planned times for a given rate (the arrival generator is re-seeded
for each run), so differences between runs are differences between the servers' models.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pdtrt.bench.failures import Failures, all_failed_error
from pdtrt.bench.records import RequestRecord
from pdtrt.bench.runner import RunPlan, run_plan
from pdtrt.bench.server_side import MetricsProbe, ServerBreakdown
from pdtrt.bench.stats import Summary, summarize
from pdtrt.bench.tokenizer_choice import TokenizerChoice
from pdtrt.bench.workload import RequestPlan
from pdtrt.client import LLMClient
from pdtrt.errors import BenchError
from pdtrt.workload.arrivals import ArrivalProcess, LoopKind, arrival_rng, arrival_times_s
from pdtrt.workload.slo import SLO

__all__ = ["COMPARED", "BenchConfig", "BenchReport", "RunResult", "run_bench", "run_label"]

COMPARED = ("ensemble", "ensemble_aggregated")


@dataclass(frozen=True, kw_only=True)
class BenchConfig:
    models: tuple[str, ...] = ("ensemble",)
    loop: LoopKind = LoopKind.OPEN
    process: ArrivalProcess = ArrivalProcess.POISSON
    rates_per_s: tuple[float, ...] = (1.0,)
    concurrency: int = 1
    num_requests: int | None = None
    duration_s: float | None = None
    num_warmup: int = 0
    timeout_s: float = 60.0
    stream: bool = True
    ignore_eos: bool = False
    workload: RequestPlan
    slo: SLO = field(default_factory=SLO)
    cost_per_hour_usd: float | None = None

    def __post_init__(self) -> None:
        if not self.models:
            raise BenchError("no model to benchmark")
        if self.num_requests is None and self.duration_s is None:
            raise BenchError("a benchmark needs a bound: --requests N or --duration S")
        if self.loop is LoopKind.OPEN and not self.rates_per_s:
            raise BenchError("an open-loop benchmark needs a rate")

    def to_dict(self) -> dict[str, object]:
        return {
            "models": list(self.models), "loop": str(self.loop),
            "arrival_process": str(self.process) if self.loop is LoopKind.OPEN else None,
            "rates_per_s": list(self.rates_per_s) if self.loop is LoopKind.OPEN else None,
            "concurrency": self.concurrency, "num_requests": self.num_requests,
            "duration_s": self.duration_s, "num_warmup": self.num_warmup,
            "timeout_s": self.timeout_s, "stream": self.stream, "ignore_eos": self.ignore_eos,
            "isl": str(self.workload.isl), "osl": str(self.workload.osl),
            "input_length_unit": self.workload.length_unit,
            "dataset_prompts": len(self.workload.dataset), "seed": self.workload.seed,
            "slo": self.slo.to_dict(),
            "cost_per_hour_usd": self.cost_per_hour_usd,
        }


def run_label(model: str, rate_per_s: float | None, concurrency: int | None) -> str:
    load = f"rate {rate_per_s:g}/s" if rate_per_s is not None else f"concurrency {concurrency}"
    return f"{model} @ {load}"


@dataclass(frozen=True, kw_only=True)
class RunResult:
    model: str
    rate_per_s: float | None  # open loop
    concurrency: int | None  # closed loop
    records: tuple[RequestRecord, ...]
    summary: Summary
    server: ServerBreakdown | None = None  # the router's histograms (``--metrics-url``)

    @property
    def label(self) -> str:
        return run_label(self.model, self.rate_per_s, self.concurrency)

    @property
    def failures(self) -> Failures:
        return Failures.of(self.records)

    @property
    def slug(self) -> str:
        load = f"rate{self.rate_per_s:g}" if self.rate_per_s is not None \
            else f"c{self.concurrency}"
        return f"{self.model}-{load}"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "model": self.model, "rate_per_s": self.rate_per_s, "concurrency": self.concurrency,
            "summary": self.summary.to_dict(), "failures": self.failures.to_dict()}
        if self.server is not None:
            out["server"] = self.server.to_dict()
        return out


@dataclass(frozen=True, kw_only=True)
class BenchReport:
    config: BenchConfig
    runs: tuple[RunResult, ...]
    tokenizer: TokenizerChoice | None = None  # what the input lengths were counted with

    @property
    def models(self) -> tuple[str, ...]:
        return self.config.models

    @property
    def is_sweep(self) -> bool:
        return self.config.loop is LoopKind.OPEN and len(self.config.rates_per_s) > 1

    def runs_of(self, model: str) -> list[RunResult]:
        return [r for r in self.runs if r.model == model]

    def best_rate_per_s(self, model: str) -> float | None:
        """The highest swept rate whose run met the SLOs (None: none did, or no SLOs)."""
        good = [r.rate_per_s for r in self.runs_of(model)
                if r.rate_per_s is not None and r.summary.meets_slo]
        return max(good) if good else None

    def error(self) -> BenchError | None:
        """The error to exit with when every request of some run failed, else None."""
        return all_failed_error({run.label: run.failures for run in self.runs})

    def failed_runs(self) -> list[str]:
        """``label: 3 of 20 requests failed (...)`` for each run that lost requests."""
        return [f"{run.label}: {run.failures.describe()}" for run in self.runs
                if run.failures.num_failed]

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"config": self.config.to_dict(),
                                  "runs": [r.to_dict() for r in self.runs]}
        if self.tokenizer is not None:
            out["tokenizer"] = self.tokenizer.to_dict()
        if self.is_sweep:
            out["best_rate_per_s"] = {m: self.best_rate_per_s(m) for m in self.models}
        error = self.error()
        if error is not None:
            out["error"] = error.to_dict()
        return out


def run_bench(client: LLMClient, config: BenchConfig, *,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep,
              on_run: Callable[[str, int | None], Callable[[int, int | None], None] | None]
              | None = None,
              probe: MetricsProbe | None = None) -> BenchReport:
    """Run every (rate, model) of ``config``. ``on_run(label, total)`` may return a progress
    callback for that run. With ``probe``, each run also gets the server's breakdown of its
    measured requests (:mod:`pdtrt.bench.server_side`). Raises the client's errors for an
    unreachable server or model, and the probe's for an endpoint that cannot be scraped."""
    for model in config.models:
        client.check(model)
    if probe is not None:
        probe.check()
    loads: list[float | None] = list(config.rates_per_s) if config.loop is LoopKind.OPEN \
        else [None]
    runs = []
    for rate in loads:
        arrivals: tuple[float, ...] = ()
        if rate is not None:
            arrivals = arrival_times_s(config.process, rate, arrival_rng(config.workload.seed),
                                       num_requests=config.num_requests,
                                       duration_s=config.duration_s)
        for model in config.models:
            plan = RunPlan(model=model, workload=config.workload, loop=config.loop,
                           arrivals_s=arrivals, concurrency=config.concurrency,
                           num_requests=config.num_requests, duration_s=config.duration_s,
                           num_warmup=config.num_warmup, timeout_s=config.timeout_s,
                           stream=config.stream, ignore_eos=config.ignore_eos)
            concurrency = config.concurrency if rate is None else None
            progress = on_run(run_label(model, rate, concurrency), plan.total) if on_run \
                else None
            records = run_plan(client, plan, clock=clock, sleep=sleep, on_progress=progress,
                               on_measured=probe.start if probe is not None else None)
            runs.append(RunResult(
                model=model, rate_per_s=rate,
                concurrency=concurrency,
                records=tuple(records),
                server=probe.stop() if probe is not None else None,
                summary=summarize(records, slo=config.slo,
                                  cost_per_hour_usd=config.cost_per_hour_usd)))
    return BenchReport(config=config, runs=tuple(runs))
