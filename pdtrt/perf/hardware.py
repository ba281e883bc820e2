"""One model instance as the performance model sees it: a model on a TP x PP group of one GPU type.

:class:`Instance` bundles the model facts, the GPU, the parallelism and the precisions, and
derives the per-GPU quantities every step-time formula needs: the peak FLOP/s that applies
(FP8 tensor cores only when the weights are FP8 *and* the GPU has them), the weight bytes one
GPU reads per step, the KV bytes per token on one rank. It does no timing itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.errors import InfeasibleError
from pdtrt.facts.catalog import GPU
from pdtrt.facts.memory import MemoryFit, fit
from pdtrt.facts.model import ModelFacts
from pdtrt.perf.scheduling import CapacityPolicy

__all__ = ["Instance"]


@dataclass(frozen=True, kw_only=True)
class Instance:
    """A model served by one TP x PP group of ``gpu`` (one engine instance)."""

    model: ModelFacts
    gpu: GPU
    tp: int = 1
    pp: int = 1
    dtype: DType = DType.BF16
    weights: WeightQuant = WeightQuant.NONE
    kv_dtype: KVDType = KVDType.BF16
    max_batch_size: int = 256
    max_num_tokens: int = 8192
    tokens_per_block: int = 32
    kv_cache_fraction: float = 0.9
    capacity_policy: CapacityPolicy = CapacityPolicy.GUARANTEED_NO_EVICT

    def __post_init__(self) -> None:
        problem = self.model.tp_problem(self.tp)
        if problem:
            raise InfeasibleError(f"{self.model.name}: {problem}",
                                  hint=f"valid TP: {self.model.valid_tps()}")
        if self.weights is WeightQuant.FP8 and not self.gpu.has_fp8:
            raise InfeasibleError(f"{self.gpu.key} has no FP8 tensor cores; use --weights bf16")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def peak_flops_per_s(self) -> float:
        """Dense peak of one GPU for this weight precision (FP8 GEMMs need FP8 weights)."""
        if self.weights is WeightQuant.FP8 and self.gpu.fp8_dense_flops_per_s:
            return self.gpu.fp8_dense_flops_per_s
        return self.gpu.bf16_dense_flops_per_s

    @property
    def attention_peak_flops_per_s(self) -> float:
        """Attention runs in FP8 only with an FP8 KV cache on an FP8-capable GPU."""
        if self.kv_dtype is KVDType.FP8 and self.gpu.fp8_dense_flops_per_s:
            return self.gpu.fp8_dense_flops_per_s
        return self.gpu.bf16_dense_flops_per_s

    @property
    def weight_read_bytes_per_gpu(self) -> float:
        """Weight bytes one GPU streams per step: its share of all weights except the input
        embedding table (a lookup reads only the rows it needs; a tied LM head still reads it)."""
        total = self.model.weight_bytes(self.dtype, self.weights)
        if not self.model.tie_word_embeddings:
            total -= self.model.vocab_size * self.model.hidden_size * self.dtype.num_bytes
        return total / self.num_gpus

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token occupies on one rank."""
        return self.model.kv_bytes_per_token(self.kv_dtype, tp=self.tp, pp=self.pp)

    @property
    def kv_bytes_per_token_all_ranks(self) -> int:
        """KV bytes of one token summed over the instance (what a KV transfer moves)."""
        return self.kv_bytes_per_token * self.num_gpus

    @property
    def activation_bytes_per_token(self) -> int:
        """Bytes of one token's hidden state (the payload of a TP all-reduce)."""
        return self.model.hidden_size * self.dtype.num_bytes

    def memory(self, seq_len: int) -> MemoryFit:
        """Memory fit of one GPU of this instance for sequences of ``seq_len`` tokens."""
        return fit(self.model, self.gpu, tp=self.tp, pp=self.pp, seq_len=seq_len,
                   dtype=self.dtype, weights=self.weights, kv_dtype=self.kv_dtype,
                   max_num_tokens=self.max_num_tokens, tokens_per_block=self.tokens_per_block,
                   kv_cache_fraction=self.kv_cache_fraction)

    def max_running_seqs(self, seq_len: int) -> int:
        """Sequences of ``seq_len`` tokens whose whole KV fits at once, capped by
        ``max_batch_size`` (the guaranteed-no-evict view; see :mod:`pdtrt.perf.scheduling`)."""
        return min(self.memory(seq_len).max_concurrent_seqs, self.max_batch_size)

    def price_per_hour_usd(self) -> float:
        return (self.gpu.price_per_hour_usd or 0.0) * self.num_gpus

    def label(self) -> str:
        return f"{self.gpu.key} TP{self.tp}" + (f" PP{self.pp}" if self.pp > 1 else "")
