"""One simulation run: a serving configuration, factors, workload, policies, SLO and a seed.

The SLO is :class:`pdtrt.workload.SLO`, judged by :func:`pdtrt.workload.evaluate_slo` -- the
same definition ``pdtrt bench`` applies to measured runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import ServingMode
from pdtrt.errors import InfeasibleError
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.sim.scheduling import BatchPolicy, RoutingPolicy
from pdtrt.sim.workload import SimWorkload
from pdtrt.workload.slo import SLO

__all__ = ["SimConfig"]


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    serving: ServingConfig
    factors_prefill: EfficiencyFactors
    factors_decode: EfficiencyFactors
    workload: SimWorkload
    num_requests: int = 1000
    seed: int = 0
    batch_policy: BatchPolicy = BatchPolicy.CHUNKED
    routing: RoutingPolicy = RoutingPolicy.LEAST_LOADED
    slo: SLO = SLO()
    warmup_share: float = 0.1
    kv_overlap_weight: float = 1.0  # kv-aware routing: weight of net-new prompt tokens
    # conditional disaggregation: a request whose net-new prompt at its decode replica is at
    # most this many tokens is prefilled there (pdtrt.prefill_policy); 0: never
    max_local_prefill_tokens: int = 0
    # ... and while even the least loaded prefill replica holds at least this many requests,
    # a request whose prompt fits the decode engine's step is prefilled there too; 0: never
    # (both only for a disaggregated configuration)
    max_prefill_queue_depth: float = 0.0
    # a mixed decode pool: (instance, count) of other GPU types beside the serving config's
    # decode replicas (disaggregated only), and how a decode replica is chosen
    extra_decode: tuple[tuple[Instance, int], ...] = ()
    decode_routing: RoutingPolicy = RoutingPolicy.LEAST_LOADED

    def __post_init__(self) -> None:
        if self.extra_decode and self.serving.mode is not ServingMode.DISAGGREGATED:
            raise InfeasibleError("extra_decode (a mixed decode pool) needs a disaggregated "
                                  "serving configuration")
        if self.num_requests < 1:
            raise InfeasibleError(f"num_requests must be >= 1, got {self.num_requests}")
        if self.max_local_prefill_tokens < 0:
            raise InfeasibleError("max_local_prefill_tokens must be >= 0, got "
                                  f"{self.max_local_prefill_tokens}")
        if not self.max_prefill_queue_depth >= 0:
            raise InfeasibleError("max_prefill_queue_depth must be >= 0, got "
                                  f"{self.max_prefill_queue_depth}")
        if not self.kv_overlap_weight >= 0:
            raise InfeasibleError(f"kv_overlap_weight must be >= 0, got {self.kv_overlap_weight}")
        for role, inst, need in self._pools():
            if inst.memory(need).max_concurrent_seqs < 1:
                raise InfeasibleError(
                    f"{role} instance {inst.label()} cannot hold one sequence of {need} tokens: "
                    f"{inst.memory(need).explain()}",
                    hint="use a larger TP, fp8 weights / KV cache, or a GPU with more memory")

    @property
    def conditional(self) -> bool:
        """Whether some request may be prefilled by its decode replica."""
        return bool(self.max_local_prefill_tokens or self.max_prefill_queue_depth)

    @property
    def max_isl(self) -> int:
        """The longest prompt of this run's workload, a conversation's history included (KV
        caches are sized for it)."""
        return self.workload.max_prompt_tokens(self.seed)

    @property
    def max_seq_len(self) -> int:
        return self.max_isl + self.workload.max_osl(self.seed)

    def _pools(self):
        s = self.serving
        if s.mode is ServingMode.AGGREGATED:
            return [("aggregated", s.prefill, self.max_seq_len)]
        assert s.decode is not None
        return [("prefill", s.prefill, self.max_isl), ("decode", s.decode, self.max_seq_len)]
