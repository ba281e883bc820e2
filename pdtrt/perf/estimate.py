"""``pdtrt estimate``: one fixed configuration -> TTFT, TPOT, throughput, memory, cost.

Open loop (``rate_per_s``): the operating point at that rate (:mod:`pdtrt.perf.point`).
Closed loop (``concurrency`` C clients, each sending its next request when the last ends): the
rate ``r`` solving Little's law ``C = r (TTFT(r) + (osl - 1) TPOT(r))``, found by bisection --
so queueing and prefills interrupting decode raise TTFT and TPOT as C grows, which is what a
roofline at fixed batch misses. Clients beyond the running-sequence capacity (KV cache,
``max_batch_size``) wait for a slot. A closed-loop benchmark starts all clients at once; the
calibrated ``startup_share`` of requests sees that start-up queue (their prefills in a row).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdtrt.enums import ServingMode
from pdtrt.errors import InfeasibleError
from pdtrt.facts.memory import MemoryFit
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import KVLink
from pdtrt.perf.point import OperatingPoint, aggregated_point, disaggregated_point
from pdtrt.perf.step import prefill_time_s

__all__ = ["Estimate", "Load", "ServingConfig", "estimate", "operating_point"]


@dataclass(frozen=True, kw_only=True)
class Load:
    """The workload: prompt/output tokens and either a rate (open) or clients (closed loop)."""

    isl: int
    osl: int
    rate_per_s: float | None = None
    concurrency: int | None = None

    def __post_init__(self) -> None:
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise InfeasibleError("give exactly one of a request rate or a concurrency")


@dataclass(frozen=True, kw_only=True)
class ServingConfig:
    """Aggregated: ``prefill`` is the instance serving both phases, ``prefill_instances`` of
    them. Disaggregated: ``prefill_instances`` x ``prefill`` + ``decode_instances`` x
    ``decode`` joined by ``link``."""

    mode: ServingMode
    prefill: Instance
    prefill_instances: int = 1
    decode: Instance | None = None
    decode_instances: int = 0
    link: KVLink | None = None

    def __post_init__(self) -> None:
        if self.mode is ServingMode.DISAGGREGATED and (
            self.decode is None or self.link is None or self.decode_instances < 1
        ):
            raise InfeasibleError("a disaggregated configuration needs a decode pool and a link")

    @property
    def num_gpus(self) -> int:
        n = self.prefill.num_gpus * self.prefill_instances
        if self.decode is not None and self.mode is ServingMode.DISAGGREGATED:
            n += self.decode.num_gpus * self.decode_instances
        return n

    def cost_per_hour_usd(self) -> float:
        cost = self.prefill.price_per_hour_usd() * self.prefill_instances
        if self.decode is not None and self.mode is ServingMode.DISAGGREGATED:
            cost += self.decode.price_per_hour_usd() * self.decode_instances
        return cost

    def label(self) -> str:
        if self.mode is ServingMode.AGGREGATED:
            return f"agg {self.prefill_instances}x {self.prefill.label()}"
        assert self.decode is not None
        return (f"disagg {self.prefill_instances}x {self.prefill.label()} + "
                f"{self.decode_instances}x {self.decode.label()}")


@dataclass(frozen=True, kw_only=True)
class Estimate:
    config: ServingConfig
    load: Load
    point: OperatingPoint
    req_per_s: float
    ttft_s: float
    ttft_p90_s: float
    memory: dict[str, MemoryFit] = field(default_factory=dict)

    @property
    def output_tok_per_s(self) -> float:
        return self.req_per_s * self.load.osl

    @property
    def usd_per_mtok(self) -> float | None:
        """Cost of a million output tokens at this throughput."""
        cost = self.config.cost_per_hour_usd()
        if not cost or not self.output_tok_per_s or not self.point.stable:
            return None
        return cost / 3600 / self.output_tok_per_s * 1e6

    def to_dict(self) -> dict[str, object]:
        def ms(s: float) -> float | None:
            return None if math.isinf(s) else round(s * 1e3, 3)

        p = self.point
        return {
            "mode": str(self.config.mode),
            "config": self.config.label(),
            "isl": self.load.isl,
            "osl": self.load.osl,
            "concurrency": self.load.concurrency,
            "rate_per_s": self.load.rate_per_s,
            "stable": p.stable,
            "ttft_ms": ms(self.ttft_s),
            "ttft_p90_ms": ms(self.ttft_p90_s),
            "tpot_ms": ms(p.tpot_s),
            "tpot_p90_ms": ms(p.tpot_p90_s),
            "itl_p90_ms": ms(p.itl_p90_s),
            "e2e_ms": ms(self.ttft_s + p.tpot_s * p.osl_minus_one),
            "output_tok_per_s": round(self.output_tok_per_s, 3),
            "req_per_s": round(self.req_per_s, 4),
            "decode_batch_per_instance": None if math.isinf(p.decode_batch)
            else round(p.decode_batch, 2),
            "max_decode_batch": p.max_decode_batch,
            "prefill_ms": ms(p.prefill_service_s),
            "decode_step_ms": ms(p.decode_step_s),
            "kv_transfer_ms": ms(p.kv_transfer_s),
            "utilisation": {"prefill": round(p.prefill_util, 4),
                            "decode": round(p.decode_util, 4), "kv_link": round(p.link_util, 4)},
            "bottleneck": p.bottleneck,
            "num_gpus": self.config.num_gpus,
            "cost_per_hour_usd": round(self.config.cost_per_hour_usd(), 4),
            "usd_per_mtok": None if self.usd_per_mtok is None else round(self.usd_per_mtok, 4),
            "memory_per_gpu": {phase: m.to_dict() for phase, m in self.memory.items()},
        }


def operating_point(config: ServingConfig, f_prefill: EfficiencyFactors,
                    f_decode: EfficiencyFactors, *, isl: int, osl: int,
                    rate_per_s: float) -> OperatingPoint:
    """The operating point of the whole configuration at ``rate_per_s`` requests/s."""
    if config.mode is ServingMode.AGGREGATED:
        return aggregated_point(config.prefill, f_prefill, isl=isl, osl=osl,
                                rate_per_s=rate_per_s / config.prefill_instances)
    assert config.decode is not None and config.link is not None
    return disaggregated_point(config.prefill, config.decode, config.link, f_prefill, f_decode,
                               isl=isl, osl=osl, rate_per_s=rate_per_s,
                               prefill_instances=config.prefill_instances,
                               decode_instances=config.decode_instances)


def _closed_loop_rate(config: ServingConfig, fp: EfficiencyFactors, fd: EfficiencyFactors,
                      load: Load, clients: float) -> tuple[float, OperatingPoint]:
    """Bisection on ``r`` for ``clients = r * cycle(r)``; cycle grows with r."""
    def cycle(r: float) -> tuple[float, OperatingPoint]:
        p = operating_point(config, fp, fd, isl=load.isl, osl=load.osl, rate_per_s=r)
        return (math.inf if not p.stable else p.ttft_s + p.tpot_s * p.osl_minus_one), p

    lo, hi = 0.0, 1.0
    while math.isfinite(cycle(hi)[0]) and hi * cycle(hi)[0] < clients and hi < 1e7:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        c, _ = cycle(mid)
        if math.isfinite(c) and mid * c < clients:
            lo = mid
        else:
            hi = mid
    return lo, cycle(lo)[1]


def estimate(config: ServingConfig, load: Load, f_prefill: EfficiencyFactors,
             f_decode: EfficiencyFactors | None = None) -> Estimate:
    """Estimate ``config`` under ``load`` (see module doc). Never raises for overload: an
    open-loop rate beyond capacity gives an unstable estimate with ``inf`` latencies."""
    fd = f_decode or f_prefill
    seq = load.isl + load.osl
    dec_inst = config.decode if config.mode is ServingMode.DISAGGREGATED else config.prefill
    assert dec_inst is not None
    memory = {"prefill": config.prefill.memory(load.isl if config.decode else seq),
              "decode": dec_inst.memory(seq)}
    if config.mode is ServingMode.AGGREGATED:
        memory = {"aggregated": config.prefill.memory(seq)}
    if load.rate_per_s is not None:
        p = operating_point(config, f_prefill, fd, isl=load.isl, osl=load.osl,
                            rate_per_s=load.rate_per_s)
        return Estimate(config=config, load=load, point=p,
                        req_per_s=load.rate_per_s if p.stable else 0.0, ttft_s=p.ttft_s,
                        ttft_p90_s=p.ttft_p90_s, memory=memory)
    assert load.concurrency is not None
    slots = dec_inst.max_running_seqs(seq) * (
        config.prefill_instances if config.mode is ServingMode.AGGREGATED
        else config.decode_instances)
    running = min(float(load.concurrency), float(max(slots, 1)))
    r, p = _closed_loop_rate(config, f_prefill, fd, load, running)
    waiting = max(load.concurrency - running, 0.0)
    slot_wait = waiting / r if r > 0 else math.inf
    ttft, ttft_p90 = p.ttft_s + slot_wait, p.ttft_p90_s + slot_wait
    share = f_prefill.startup_share
    if share > 0 and p.stable:
        per_instance = load.concurrency / (config.prefill_instances)
        t_pf = prefill_time_s(config.prefill, f_prefill, load.isl)
        # the i-th request of the start-up burst waits for i - 1 prefills before its own
        startup = f_prefill.request_overhead_s + (per_instance + 1) / 2 * t_pf
        ttft = (1 - share) * ttft + share * startup
        ttft_p90 = max(ttft_p90, 0.9 * per_instance * t_pf if share > 0.1 else 0.0)
    return Estimate(config=config, load=load, point=p, req_per_s=r, ttft_s=ttft,
                    ttft_p90_s=ttft_p90, memory=memory)
