"""Memory fit: does a model fit on a GPU at a TP/PP, and how many sequences does the KV hold?

Per GPU: ``memory = weights/(tp*pp) + runtime reserve + activations + KV budget``. The KV budget
is ``kv_cache_free_gpu_mem_fraction`` (TensorRT-LLM's knob, default 0.9) of what is left; it is
cut into blocks of ``tokens_per_block`` tokens, and a sequence of ``seq_len`` tokens needs
``ceil(seq_len / tokens_per_block)`` blocks. Weights are split evenly over the ranks (an
approximation: TensorRT-LLM replicates the embedding table unless parallel embedding is on).

The reserves are estimates with sources, not measurements of pdtrt's own:
- runtime: 3.5 GiB per GPU (NVIDIA aiconfigurator's modelling hint), 1 GiB on the CPU target;
- NCCL buffers at TP/PP > 1: 0.375 GiB (aiconfigurator: 340-390 MB at TP 2-8);
- activations: ``max_num_tokens`` tokens of the widest per-rank intermediate tensors of one layer
  (residual, q/k/v, gated MLP) in the model dtype;
- CUDA graphs of decode batches (:func:`cuda_graph_bytes`): per captured batch size ``b``,
  32 MiB for the graph and its static buffers plus ``b`` tokens of activations and of float32
  logits, summed over the sizes. vLLM logs 24-28 MiB per captured size of an 8B-class model
  (vllm-project/vllm PR #22897) and 0.36 GiB for 16 sizes (gpustack/runner PR #251); its own
  start-up message bounds graphs at "1~3 GiB per GPU" (quoted in mlcommons/inference #2267).
  The sum assumes no sharing between graphs; TensorRT-LLM captures into one shared memory pool,
  so the real cost is lower.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import DeviceKind, DType, KVDType, WeightQuant
from pdtrt.errors import InfeasibleError
from pdtrt.facts.catalog import GPU
from pdtrt.facts.model import ModelFacts

__all__ = ["MemoryFit", "cuda_graph_bytes", "fit", "min_tp_that_fits"]

GIB = 1 << 30
GPU_RUNTIME_RESERVE_BYTES = int(3.5 * GIB)
CPU_RUNTIME_RESERVE_BYTES = 1 * GIB
NCCL_RESERVE_BYTES = int(0.375 * GIB)
CUDA_GRAPH_FIXED_BYTES = 32 << 20  # per captured batch size: the graph, its static buffers
LOGITS_BYTES = 4  # float32 logits, one row of vocab_size per sequence of a captured batch


@dataclass(frozen=True, kw_only=True)
class MemoryFit:
    """The memory budget of one GPU of a TP x PP group, and the KV capacity it leaves."""

    gpu: str
    tp: int
    pp: int
    seq_len: int
    memory_bytes: int
    weight_bytes: int
    runtime_reserve_bytes: int
    activation_bytes: int
    kv_cache_fraction: float
    kv_budget_bytes: int
    kv_bytes_per_token: int
    tokens_per_block: int
    kv_blocks: int
    blocks_per_seq: int

    @property
    def free_bytes(self) -> int:
        """Memory left after weights, runtime and activations (may be negative)."""
        return self.memory_bytes - self.weight_bytes - self.runtime_reserve_bytes - (
            self.activation_bytes
        )

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.tokens_per_block

    @property
    def max_concurrent_seqs(self) -> int:
        """Sequences of ``seq_len`` tokens whose KV fits at once."""
        return self.kv_blocks // self.blocks_per_seq

    @property
    def fits(self) -> bool:
        return self.max_concurrent_seqs >= 1

    def explain(self) -> str:
        """The arithmetic, in GiB, as one line."""
        g = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
        return (
            f"{self.gpu} TP{self.tp} PP{self.pp}: {g(self.memory_bytes)} - weights "
            f"{g(self.weight_bytes)} - runtime {g(self.runtime_reserve_bytes)} - activations "
            f"{g(self.activation_bytes)} = {g(self.free_bytes)} free; x{self.kv_cache_fraction} "
            f"for KV = {g(self.kv_budget_bytes)} = {self.kv_blocks} blocks of "
            f"{self.tokens_per_block} tokens x {self.kv_bytes_per_token} B; "
            f"{self.blocks_per_seq} blocks per {self.seq_len}-token sequence -> "
            f"{self.max_concurrent_seqs} concurrent sequences"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "tp": self.tp,
            "pp": self.pp,
            "seq_len": self.seq_len,
            "memory_bytes": self.memory_bytes,
            "weight_bytes_per_gpu": self.weight_bytes,
            "runtime_reserve_bytes": self.runtime_reserve_bytes,
            "activation_bytes": self.activation_bytes,
            "free_bytes": self.free_bytes,
            "kv_cache_fraction": self.kv_cache_fraction,
            "kv_budget_bytes": self.kv_budget_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "tokens_per_block": self.tokens_per_block,
            "kv_blocks": self.kv_blocks,
            "kv_tokens": self.kv_tokens,
            "blocks_per_seq": self.blocks_per_seq,
            "max_concurrent_seqs": self.max_concurrent_seqs,
            "fits": self.fits,
        }


def _activation_bytes(model: ModelFacts, dtype: DType, tp: int, max_num_tokens: int) -> int:
    per_token = (
        2 * model.hidden_size
        + (model.q_dim + 2 * model.kv_dim) // tp
        + 2 * model.intermediate_size // tp
    )
    return max_num_tokens * per_token * dtype.num_bytes


def cuda_graph_bytes(model: ModelFacts, batch_sizes: tuple[int, ...], *,
                     dtype: DType = DType.BF16, tp: int = 1) -> int:
    """Estimated bytes of decode CUDA graphs captured at ``batch_sizes`` on one rank (the
    module docstring gives the sources); 0 for no sizes."""
    return sum(CUDA_GRAPH_FIXED_BYTES + _activation_bytes(model, dtype, tp, size)
               + size * model.vocab_size * LOGITS_BYTES for size in batch_sizes)


def fit(
    model: ModelFacts,
    gpu: GPU,
    *,
    tp: int = 1,
    pp: int = 1,
    seq_len: int,
    dtype: DType = DType.BF16,
    weights: WeightQuant = WeightQuant.NONE,
    kv_dtype: KVDType = KVDType.BF16,
    max_num_tokens: int = 8192,
    tokens_per_block: int = 32,
    kv_cache_fraction: float = 0.9,
) -> MemoryFit:
    """Memory budget of one GPU serving ``model`` at ``tp`` x ``pp`` (sizes in bytes)."""
    ranks = tp * pp
    runtime = GPU_RUNTIME_RESERVE_BYTES if gpu.kind is DeviceKind.GPU else CPU_RUNTIME_RESERVE_BYTES
    if ranks > 1:
        runtime += NCCL_RESERVE_BYTES
    weight_bytes = -(-model.weight_bytes(dtype, weights) // ranks)
    activation = _activation_bytes(model, dtype, tp, max_num_tokens)
    free = gpu.memory_bytes - weight_bytes - runtime - activation
    kv_budget = max(int(free * kv_cache_fraction), 0)
    per_token = model.kv_bytes_per_token(kv_dtype, tp=tp, pp=pp)
    kv_blocks = kv_budget // (per_token * tokens_per_block)
    return MemoryFit(
        gpu=gpu.key,
        tp=tp,
        pp=pp,
        seq_len=seq_len,
        memory_bytes=gpu.memory_bytes,
        weight_bytes=weight_bytes,
        runtime_reserve_bytes=runtime,
        activation_bytes=activation,
        kv_cache_fraction=kv_cache_fraction,
        kv_budget_bytes=kv_budget,
        kv_bytes_per_token=per_token,
        tokens_per_block=tokens_per_block,
        kv_blocks=kv_blocks,
        blocks_per_seq=-(-seq_len // tokens_per_block),
    )


def min_tp_that_fits(model: ModelFacts, gpu: GPU, **kwargs: object) -> MemoryFit:
    """The fit at the smallest valid TP (PP 1) that holds one sequence.

    Raises :class:`InfeasibleError` with the arithmetic at the largest TP when none does.
    """
    tps = model.valid_tps(gpu.max_gpus_per_node)
    last: MemoryFit | None = None
    for tp in tps:
        last = fit(model, gpu, tp=tp, **kwargs)  # type: ignore[arg-type]
        if last.fits:
            return last
    assert last is not None, "TP 1 is always valid"
    raise InfeasibleError(
        f"{model.name} does not fit on {gpu.key} even at TP {last.tp}: {last.explain()}",
        hint="use a GPU with more memory, quantise weights / KV cache (fp8), shorten the "
        "sequence, or use pipeline parallelism",
    )
