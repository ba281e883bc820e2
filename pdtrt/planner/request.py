"""What ``pdtrt plan`` is asked: model, GPUs, workload, SLO, bounds -- typed, from flags.

:func:`resolve_request` turns the command line's values (names, a GPU list, a prices file) into
a :class:`PlanRequest`, validating once; the CLI only passes them on. The SLO is the shared
:class:`pdtrt.workload.SLO`: ``--ttft-p90 MS --itl-p90 MS`` are per-request thresholds (TTFT,
and TPOT -- the request's mean inter-token latency) that 90 % of requests must meet
(:mod:`pdtrt.workload.slo`). The workload is Poisson arrivals at the target rate with fixed
lengths (the ``N`` form of the shared length syntax); with ``--shared-prefix`` / ``--turns``
it is a chat workload (:class:`pdtrt.workload.ConversationShape`): ``--rate`` still counts
requests (turns), conversations start at ``rate / turns``, and the plan assumes what such a
workload is served with -- KV block reuse on both pools and ``kv_aware`` routing.
``--have TYPE:N,...`` with ``--power-price`` plans from owned cards (:mod:`pdtrt.planner.fleet`);
``--max-gpus`` is a total (``8``) or per type (``h100-sxm:4,l40s:8``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pdtrt.enums import KVDType, Percentile, ServingBackend, WeightQuant
from pdtrt.errors import PdtrtError
from pdtrt.facts.catalog import GPU, Catalog, load_catalog, load_prices
from pdtrt.facts.model import ModelFacts, load_model_facts
from pdtrt.perf.factors import EfficiencyFactors, load_factors
from pdtrt.planner.fleet import Fleet, parse_counts
from pdtrt.planner.space import SearchBounds
from pdtrt.sim.scheduling import RoutingPolicy
from pdtrt.sim.workload import SimWorkload
from pdtrt.workload.arrivals import ArrivalProcess, LoopKind
from pdtrt.workload.conversation import ConversationShape
from pdtrt.workload.lengths import LengthDist
from pdtrt.workload.slo import SLO

__all__ = ["KV_DTYPES", "WEIGHTS", "PlanRequest", "resolve_request"]

STEADY_CONVERSATIONS = 4  # conversations simulated per one open at once (PlanRequest)
WEIGHTS = {"bf16": WeightQuant.NONE, "fp8": WeightQuant.FP8}  # --weights
KV_DTYPES = {"bf16": KVDType.BF16, "fp8": KVDType.FP8}  # --kv-dtype


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    model: ModelFacts
    gpus: tuple[GPU, ...]
    isl: int
    osl: int
    rate_per_s: float
    slo: SLO
    factors: EfficiencyFactors
    weights: WeightQuant = WeightQuant.NONE
    kv_dtype: KVDType = KVDType.FP8
    bounds: SearchBounds = SearchBounds()
    same_node: bool = False
    num_requests: int = 300
    seed: int = 0
    verify_per_mode: int = 3
    max_sims_per_mode: int = 8
    model_path: Path | None = None  # where the model came from, when it is a local path
    catalog: Catalog | None = None  # the GPUs' catalog (with --prices), for the written spec
    shared_prefix: int = 0  # system-prompt tokens every conversation starts with
    turns: int = 1  # requests per conversation
    think_s: float = 0.0  # from a turn's last token to the next turn's send
    followup_isl: int | None = None  # new tokens of turns > 0 (None: isl)
    fleet: Fleet | None = None  # the cards the user owns (--have)

    @property
    def shape(self) -> ConversationShape:
        """The workload's conversations (one request each without ``--turns``)."""
        return ConversationShape(isl=self.isl, osl=self.osl, shared_prefix=self.shared_prefix,
                                 turns=self.turns, think_s=self.think_s,
                                 followup_isl=self.followup_isl)

    @property
    def bounded_gpus(self) -> dict[str, int]:
        """The cards a plan may use per bounded GPU type: the owned ones (``--have``) and the
        per-type caps (``--max-gpus TYPE:N``), the fewer where both bound one type; a mixed
        decode pool puts a bounded type's cards first (:mod:`pdtrt.planner.mixed`)."""
        out = dict(self.bounds.max_gpus_per_type)
        for key, n in (self.fleet.owned if self.fleet else {}).items():
            out[key] = min(n, out.get(key, n))
        return out

    @property
    def routing(self) -> RoutingPolicy:
        """kv_aware when block reuse has something to find (the plan then writes block reuse
        on and ``router.routing: kv_aware``), the router's default otherwise."""
        return RoutingPolicy.KV_AWARE if self.shape.reuses else RoutingPolicy.LEAST_LOADED

    @property
    def sim_requests(self) -> int:
        """Requests per verifying simulation: ``num_requests``, or for conversations enough of
        them that the run is mostly steady state -- at least ``STEADY_CONVERSATIONS`` times the
        conversations open at once (``rate x (think time + a turn at the SLO's bounds)``), a
        conversation's turns being spread over its whole length."""
        if self.turns == 1:
            return self.num_requests
        turn_s = ((self.slo.ttft_ms or 0) + (self.slo.itl_ms or 0) * self.osl) / 1e3
        open_at_once = math.ceil(self.rate_per_s * (self.think_s + turn_s))
        conversations = max(math.ceil(self.num_requests / self.turns),
                            STEADY_CONVERSATIONS * open_at_once)
        return conversations * self.turns

    @property
    def workload(self) -> SimWorkload:
        """What every verifying simulation receives."""
        followup = self.followup_isl
        return SimWorkload(isl=LengthDist.fixed(self.isl), osl=LengthDist.fixed(self.osl),
                           loop=LoopKind.OPEN, process=ArrivalProcess.POISSON,
                           rate_per_s=self.rate_per_s / self.turns,
                           shared_prefix=self.shared_prefix, turns=self.turns,
                           think_s=self.think_s,
                           followup_isl=LengthDist.fixed(followup) if followup else None)


def _gpus(names: str | None, catalog: Catalog, owned: dict[str, int]) -> tuple[GPU, ...]:
    """The GPU types to search: the owned ones, then those of ``--gpus``."""
    keys = list(owned) + [n.strip() for n in (names or "").split(",") if n.strip()]
    if not keys:
        raise PdtrtError("--gpus names no GPU", hint="e.g. --gpus h100-sxm,l40s")
    return tuple(dict.fromkeys(catalog.get(n) for n in keys))


def _bounds(max_gpus: int | str | None, budget: float | None, catalog: Catalog,
            owned: dict[str, int]) -> SearchBounds:
    if max_gpus is not None and budget is not None:
        raise PdtrtError("give at most one of --max-gpus and --budget")
    if budget is not None and owned:
        raise PdtrtError("--budget prices rented cards only; with --have give --max-gpus",
                         hint="e.g. --max-gpus h100-sxm:4,l40s:8")
    if isinstance(max_gpus, str) and ":" in max_gpus:
        return SearchBounds(max_gpus_per_type=parse_counts(max_gpus, catalog,
                                                           flag="--max-gpus"))
    if isinstance(max_gpus, str):
        try:
            max_gpus = int(max_gpus)
        except ValueError:
            raise PdtrtError(f"--max-gpus must be a count or TYPE:COUNT,..., got "
                             f"'{max_gpus}'", hint="e.g. --max-gpus 8 or --max-gpus "
                             "h100-sxm:4,l40s:8") from None
    if max_gpus is not None and max_gpus < 1:
        raise PdtrtError(f"--max-gpus must be at least 1, got {max_gpus}")
    return SearchBounds(max_gpus=max_gpus, budget_usd_per_hour=budget)


def _fleet(have: str | None, power_price: float | None, catalog: Catalog) -> Fleet | None:
    if have is None:
        if power_price is not None:
            raise PdtrtError("--power-price prices owned cards: give them with --have",
                             hint="e.g. --have l40s:8 --power-price 0.15")
        return None
    owned = parse_counts(have, catalog, flag="--have")
    if power_price is None:
        raise PdtrtError("--have needs --power-price (USD per kWh): owned cards cost their "
                         "board power", hint="e.g. --power-price 0.15")
    if power_price < 0:
        raise PdtrtError(f"--power-price must be >= 0 USD per kWh, got {power_price:g}")
    fleet = Fleet(owned=owned, power_price_usd_per_kwh=power_price)
    fleet.check(catalog)
    return fleet


def resolve_request(*, model_ref: str, gpus: str | None, isl: int, osl: int,
                    rate_per_s: float, ttft_p90_ms: float, itl_p90_ms: float,
                    prices: Path | None = None, max_gpus: int | str | None = None,
                    budget_usd_per_hour: float | None = None,
                    weights: WeightQuant = WeightQuant.NONE, kv_dtype: KVDType = KVDType.FP8,
                    same_node: bool = False, backend: ServingBackend = ServingBackend.TRTLLM,
                    num_requests: int = 300, seed: int = 0, shared_prefix: int = 0,
                    turns: int = 1, think_s: float = 0.0,
                    followup_isl: int | None = None, have: str | None = None,
                    power_price: float | None = None) -> PlanRequest:
    """The typed request for the command line's values. Raises PdtrtError for both a GPU
    count and a budget, an empty GPU list, a malformed ``--have`` / ``--max-gpus`` or an
    owned fleet without a power price; WorkloadError for a conversation shape that cannot
    be (a shared prefix longer than the prompt, think time without turns); CatalogError for
    an unknown GPU or a bad prices file; ModelConfigError for a model that cannot be read."""
    ConversationShape(isl=isl, osl=osl, shared_prefix=shared_prefix, turns=turns,
                      think_s=think_s, followup_isl=followup_isl)  # checked before any work
    catalog = load_catalog(load_prices(prices) if prices else None)
    fleet = _fleet(have, power_price, catalog)
    owned = fleet.owned if fleet else {}
    gpu_list = _gpus(gpus, catalog, owned)
    bounds = _bounds(max_gpus, budget_usd_per_hour, catalog, owned)
    path = Path(model_ref)
    return PlanRequest(
        model=load_model_facts(model_ref), gpus=gpu_list, isl=isl, osl=osl,
        rate_per_s=rate_per_s,
        slo=SLO(percentile=Percentile.P90, ttft_ms=ttft_p90_ms, itl_ms=itl_p90_ms),
        factors=load_factors(backend), weights=weights, kv_dtype=kv_dtype,
        bounds=bounds,
        same_node=same_node, num_requests=num_requests, seed=seed,
        model_path=path.resolve() if path.exists() else None, catalog=catalog,
        shared_prefix=shared_prefix, turns=turns, think_s=think_s, followup_isl=followup_isl,
        fleet=fleet)
