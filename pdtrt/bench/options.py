"""From what a user asked for to a :class:`~pdtrt.bench.bench.BenchConfig`.

``pdtrt bench`` takes a handful of flags that may each be left out; a spec (``--spec``) fills
the gaps -- the loop (its workload's rate, else its concurrency), lengths, SLOs and the GPU
cost -- and pdtrt's defaults fill the rest (a closed loop of one user, 50 requests, 128 input
and 32 output tokens, SLO at p90). This module is that resolution, in the library so that any
caller gets the same benchmark as the CLI for the same request; every conflict is a
:class:`~pdtrt.errors.BenchError` naming the flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdtrt.bench.bench import BenchConfig
from pdtrt.bench.workload import RequestPlan
from pdtrt.blueprint.deployment import Deployment
from pdtrt.enums import Percentile
from pdtrt.errors import BenchError, PdtrtError
from pdtrt.workload import SLO, ArrivalProcess, LengthDist, LoopKind, parse_length, read_trace

__all__ = ["DEFAULT_ISL", "DEFAULT_OSL", "DEFAULT_REQUESTS", "BenchOptions", "parse_rates",
           "resolve_config"]

DEFAULT_REQUESTS = 50
DEFAULT_ISL = 128
DEFAULT_OSL = 32


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What the user asked for; ``None`` is "not given" (the spec's value, else the default)."""

    models: tuple[str, ...]
    rates_per_s: tuple[float, ...] = ()  # open loop (several: a sweep)
    arrival: ArrivalProcess = ArrivalProcess.POISSON
    concurrency: int | None = None  # closed loop
    num_requests: int | None = None
    duration_s: float | None = None
    num_warmup: int = 2
    isl: str | None = None  # the length syntax of pdtrt.workload.lengths
    osl: str | None = None
    dataset: Path | None = None
    seed: int = 0
    stream: bool = True
    ignore_eos: bool = False
    timeout_s: float = 60.0
    slo_ttft_ms: float | None = None
    slo_itl_ms: float | None = None
    slo_percentile: Percentile | None = None


def parse_rates(text: str) -> tuple[float, ...]:
    """``"1,2,4"`` -> (1.0, 2.0, 4.0), sorted; raises BenchError for anything else."""
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BenchError(f"--rates '{text}' is not a comma-separated list of numbers") from None
    if not rates or any(r <= 0 for r in rates):
        raise BenchError(f"--rates '{text}': every rate must be > 0")
    return tuple(sorted(rates))


def _length(text: str, what: str) -> LengthDist:
    try:
        return parse_length(text)
    except PdtrtError as exc:
        raise BenchError(f"{what}: {exc.message}", hint=exc.hint) from None


def _loop(options: BenchOptions, deployment: Deployment | None
          ) -> tuple[LoopKind, tuple[float, ...], int]:
    rates, concurrency = options.rates_per_s, options.concurrency
    if rates and concurrency is not None:
        raise BenchError("give a rate (open loop) or --concurrency (closed loop), not both")
    if not rates and concurrency is None and deployment is not None:
        workload = deployment.spec.workload
        if workload.request_rate_per_s is not None:
            rates = (workload.request_rate_per_s,)
        concurrency = workload.concurrency
    return (LoopKind.OPEN if rates else LoopKind.CLOSED), rates, concurrency or 1


def _slo(options: BenchOptions, deployment: Deployment | None) -> SLO:
    spec_slo = deployment.spec.slo if deployment is not None else None
    percentile = options.slo_percentile or (
        Percentile(spec_slo.percentile) if spec_slo else Percentile.P90)
    ttft_ms = options.slo_ttft_ms if options.slo_ttft_ms is not None else (
        spec_slo.ttft_ms if spec_slo else None)
    itl_ms = options.slo_itl_ms if options.slo_itl_ms is not None else (
        spec_slo.itl_ms if spec_slo else None)
    return SLO(percentile=percentile, ttft_ms=ttft_ms, itl_ms=itl_ms)


def resolve_config(options: BenchOptions, deployment: Deployment | None = None) -> BenchConfig:
    """The benchmark ``options`` ask for, gaps filled from ``deployment`` and the defaults.
    The workload has no tokenizer yet (:mod:`pdtrt.bench.tokenizer_choice` picks one)."""
    loop, rates, concurrency = _loop(options, deployment)
    num_requests = options.num_requests
    if num_requests is None and options.duration_s is None:
        num_requests = DEFAULT_REQUESTS
    spec_workload = deployment.spec.workload if deployment is not None else None
    workload = RequestPlan(
        isl=_length(options.isl or str(spec_workload.isl if spec_workload else DEFAULT_ISL),
                    "--isl"),
        osl=_length(options.osl or str(spec_workload.osl if spec_workload else DEFAULT_OSL),
                    "--osl"),
        seed=options.seed, dataset=read_trace(options.dataset) if options.dataset else ())
    return BenchConfig(
        models=options.models, loop=loop, process=options.arrival, rates_per_s=rates,
        concurrency=concurrency, num_requests=num_requests, duration_s=options.duration_s,
        num_warmup=options.num_warmup, timeout_s=options.timeout_s, stream=options.stream,
        ignore_eos=options.ignore_eos, workload=workload, slo=_slo(options, deployment),
        cost_per_hour_usd=deployment.cost_per_hour_usd() if deployment else None)
