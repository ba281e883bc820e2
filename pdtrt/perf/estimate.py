"""``pdtrt estimate``: one fixed configuration -> TTFT, TPOT, throughput, memory, cost.

Open loop (``rate_per_s``): the operating point at that rate (:mod:`pdtrt.perf.point`).
Closed loop (``concurrency`` C clients, each sending its next request when the last ends): the
rate of the finite-population prompt queue (:mod:`pdtrt.perf.closed_loop`), which satisfies
Little's law ``C = r (TTFT(r) + (osl - 1) TPOT(r))`` -- so queueing and prefills interrupting
decode raise TTFT and TPOT as C grows, which is what a roofline at fixed batch misses.
Clients beyond the running-sequence capacity (KV cache under the capacity policy,
``max_batch_size``; :mod:`pdtrt.perf.scheduling`) wait for a slot, which bounds TTFT by the
queue of clients rather than letting it diverge. ``Load.burst`` is how many prompts arrive
together (closed-loop clients that started together stay in step).

Every estimate says what limits it (``limits``: KV-bound, batch-bound, queue-bound, unstable),
where its step times borrow efficiencies measured for another GPU or dtype (``notes``), and
how far such predictions were off in the nearest validated regime (``error_band``, from the
leave-one-group-out validation stored with the factors). The client/HTTP overhead of a
benchmark harness (``request_overhead_s``) is not engine time: it is reported apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pdtrt.enums import ServingMode, WeightQuant
from pdtrt.errors import InfeasibleError
from pdtrt.facts.memory import MemoryFit
from pdtrt.perf.closed_loop import solve_closed_loop
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.kernels import kernel_notes
from pdtrt.perf.link import KVLink
from pdtrt.perf.point import OperatingPoint, aggregated_point, disaggregated_point
from pdtrt.perf.scheduling import running_capacity
from pdtrt.perf.step import prefill_time_s
from pdtrt.perf.validation import ErrorBand, nearest_band

__all__ = ["Estimate", "Load", "ServingConfig", "estimate", "operating_point"]


@dataclass(frozen=True, kw_only=True)
class Load:
    """The workload: prompt/output tokens and either a rate (open) or clients (closed loop).

    ``burst``: prompts that reach the engine together. None: 1 (independent arrivals) for an
    open loop, the factors' calibrated ``closed_loop_burst`` for a closed loop."""

    isl: int
    osl: int
    rate_per_s: float | None = None
    concurrency: int | None = None
    burst: float | None = None

    def __post_init__(self) -> None:
        if (self.rate_per_s is None) == (self.concurrency is None):
            raise InfeasibleError("give exactly one of a request rate or a concurrency")
        if self.burst is not None and self.burst < 1:
            raise InfeasibleError(f"burst must be >= 1 request, got {self.burst}")

    def burst_for(self, f: EfficiencyFactors, instances: int) -> float:
        """Prompts arriving together at one instance (never more than its share of clients)."""
        if self.concurrency is None:
            return self.burst or 1.0
        burst = self.burst if self.burst is not None else f.closed_loop_burst
        return max(1.0, min(burst, self.concurrency / instances))


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
    client_overhead_s: float = 0.0
    burst: float = 1.0
    limits: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    error_band: ErrorBand | None = None

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
            "engine_ttft_ms": ms(self.ttft_s - self.client_overhead_s),
            "client_overhead_ms": round(self.client_overhead_s * 1e3, 3),
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
            "prompts_per_step": round(p.prompts_per_step, 2),
            "decode_step_ms": ms(p.decode_step_s),
            "kv_transfer_ms": ms(p.kv_transfer_s),
            "utilisation": {"prefill": round(p.prefill_util, 4),
                            "decode": round(p.decode_util, 4), "kv_link": round(p.link_util, 4)},
            "bottleneck": p.bottleneck,
            "num_gpus": self.config.num_gpus,
            "cost_per_hour_usd": round(self.config.cost_per_hour_usd(), 4),
            "usd_per_mtok": None if self.usd_per_mtok is None else round(self.usd_per_mtok, 4),
            "memory_per_gpu": {phase: m.to_dict() for phase, m in self.memory.items()},
            "burst": self.burst,
            "limits": list(self.limits),
            "notes": list(self.notes),
            "error_band": None if self.error_band is None else self.error_band.to_dict(),
        }


def operating_point(config: ServingConfig, f_prefill: EfficiencyFactors,
                    f_decode: EfficiencyFactors, *, isl: int, osl: int,
                    rate_per_s: float, burst: float = 1.0) -> OperatingPoint:
    """The operating point of the whole configuration at ``rate_per_s`` requests/s; ``burst``
    prompts reach each prefill (or aggregated) instance together."""
    if config.mode is ServingMode.AGGREGATED:
        return aggregated_point(config.prefill, f_prefill, isl=isl, osl=osl,
                                rate_per_s=rate_per_s / config.prefill_instances, burst=burst)
    assert config.decode is not None and config.link is not None
    return disaggregated_point(config.prefill, config.decode, config.link, f_prefill, f_decode,
                               isl=isl, osl=osl, rate_per_s=rate_per_s,
                               prefill_instances=config.prefill_instances,
                               decode_instances=config.decode_instances, burst=burst)


def _limits(config: ServingConfig, load: Load, p: OperatingPoint, slots: int) -> tuple[str, ...]:
    out = []
    if not p.stable:
        out.append(f"unstable: {p.bottleneck}")
    inst = config.decode if config.mode is ServingMode.DISAGGREGATED else config.prefill
    assert inst is not None
    cap = running_capacity(inst, load.isl, load.osl)
    if load.concurrency is not None and load.concurrency > slots:
        what = "KV-bound" if cap.limit == "KV cache" else "batch-bound"
        out.append(f"{what}: {load.concurrency} clients, {slots} run at once "
                   f"({cap.limit}, {inst.capacity_policy}); the rest wait for a slot")
    elif p.stable and p.decode_batch >= 0.95 * cap.seqs:
        out.append(f"{'KV' if cap.limit == 'KV cache' else 'batch'}-bound: decode batch "
                   f"{p.decode_batch:.0f} of {cap.seqs} that fit ({cap.limit})")
    if p.stable and p.prompt_util >= 0.8:
        out.append(f"queue-bound: prompts queue for the engine ({p.prompt_util:.0%} of the "
                   "prompts per second its steps can take)")
    return tuple(out)


def _notes(config: ServingConfig, fp: EfficiencyFactors,
           fd: EfficiencyFactors) -> tuple[str, ...]:
    pools = [(config.prefill, fp)]
    if config.mode is ServingMode.DISAGGREGATED and config.decode is not None:
        pools.append((config.decode, fd))
    notes: list[str] = []
    for inst, f in pools:
        if f.kernels is None:
            found = ("no kernel curves: scalar efficiency factors (fitted on H100) for "
                     f"{inst.gpu.key}",)
        else:
            found = kernel_notes(f.kernels, inst.gpu, dtype=inst.dtype, weights=inst.weights,
                                 kv_dtype=inst.kv_dtype)
        notes += [n for n in found if n not in notes]
    return tuple(notes)


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
    instances = (config.prefill_instances if config.mode is ServingMode.AGGREGATED
                 else config.decode_instances)
    slots = running_capacity(dec_inst, load.isl, load.osl).seqs * instances
    if load.rate_per_s is not None:
        p = operating_point(config, f_prefill, fd, isl=load.isl, osl=load.osl,
                            rate_per_s=load.rate_per_s, burst=load.burst_for(f_prefill, 1))
        est = Estimate(config=config, load=load, point=p,
                       req_per_s=load.rate_per_s if p.stable else 0.0, ttft_s=p.ttft_s,
                       ttft_p90_s=p.ttft_p90_s, memory=memory)
        return _annotate(est, f_prefill, fd, slots, clients=p.decode_batch)
    assert load.concurrency is not None
    running = min(float(load.concurrency), float(max(slots, 1)))
    burst = load.burst_for(f_prefill, config.prefill_instances)
    loop = solve_closed_loop(
        lambda r: operating_point(config, f_prefill, fd, isl=load.isl, osl=load.osl,
                                  rate_per_s=r, burst=burst),
        clients=running, instances=config.prefill_instances, burst=burst)
    r, p = loop.rate_per_s, loop.point
    waiting = max(load.concurrency - running, 0.0)
    slot_wait = waiting / r if r > 0 else math.inf
    before = f_prefill.request_overhead_s + p.join_s + slot_wait
    ttft, ttft_p90 = before + loop.prompt_response_s, before + loop.prompt_response_p90_s
    share = f_prefill.startup_share
    if share > 0 and p.stable:
        per_instance = load.concurrency / (config.prefill_instances)
        t_pf = p.prompt_service_s or prefill_time_s(config.prefill, f_prefill, load.isl)
        # the i-th request of the start-up burst waits for i - 1 prompts before its own, each
        # in a step that also carries the decodes of the requests already started
        startup = f_prefill.request_overhead_s + (per_instance + 1) / 2 * t_pf
        ttft = (1 - share) * ttft + share * startup
        ttft_p90 = max(ttft_p90, 0.9 * per_instance * t_pf if share > 0.1 else 0.0)
    est = Estimate(config=config, load=load, point=p, req_per_s=r, ttft_s=ttft,
                   ttft_p90_s=ttft_p90, memory=memory)
    return _annotate(est, f_prefill, fd, slots, clients=load.concurrency / instances)


def _annotate(est: Estimate, fp: EfficiencyFactors, fd: EfficiencyFactors, slots: int, *,
              clients: float) -> Estimate:
    """Limits, borrowed-efficiency notes, the error band and the client overhead."""
    cfg = est.config
    clients = clients if math.isfinite(clients) else float(slots)
    weights = cfg.prefill.weights
    band = nearest_band(fp.validation, tp=cfg.prefill.tp, clients=clients,
                        gpu=cfg.prefill.gpu.key,
                        weights=str(cfg.prefill.dtype if weights is WeightQuant.NONE
                                    else weights))
    instances = cfg.prefill_instances
    return replace(est, client_overhead_s=fp.request_overhead_s,
                   burst=est.load.burst_for(fp, instances),
                   limits=_limits(cfg, est.load, est.point, slots),
                   notes=_notes(cfg, fp, fd), error_band=band)
