"""One simulation run: a serving configuration, factors, workload, policies and a seed."""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import ServingMode
from pdtrt.errors import InfeasibleError
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.workload import Workload

__all__ = ["SimConfig", "SloTarget"]


@dataclass(frozen=True, kw_only=True)
class SloTarget:
    """Latency targets at a percentile; None means no target on that metric."""

    percentile: int = 90
    ttft_ms: float | None = None
    itl_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    serving: ServingConfig
    factors_prefill: EfficiencyFactors
    factors_decode: EfficiencyFactors
    workload: Workload
    num_requests: int = 1000
    seed: int = 0
    batch_policy: BatchPolicy = BatchPolicy.CHUNKED
    routing: RoutingPolicy = RoutingPolicy.LEAST_LOADED
    slo: SloTarget = SloTarget()
    warmup_share: float = 0.1

    def __post_init__(self) -> None:
        if self.num_requests < 1:
            raise InfeasibleError(f"num_requests must be >= 1, got {self.num_requests}")
        seq = self.workload.isl.max + self.workload.osl.max
        for role, inst, need in self._pools(seq):
            if inst.memory(need).max_concurrent_seqs < 1:
                raise InfeasibleError(
                    f"{role} instance {inst.label()} cannot hold one sequence of {need} tokens: "
                    f"{inst.memory(need).explain()}",
                    hint="use a larger TP, fp8 weights / KV cache, or a GPU with more memory")

    def _pools(self, seq: int):
        s = self.serving
        if s.mode is ServingMode.AGGREGATED:
            return [("aggregated", s.prefill, seq)]
        assert s.decode is not None
        return [("prefill", s.prefill, self.workload.isl.max), ("decode", s.decode, seq)]
