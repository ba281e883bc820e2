"""The GPU memory of one trtllm-1.2 phase: the KV cache's fraction and the CUDA graphs it leaves.

What TensorRT-LLM 1.2 does (PyTorch flow, ``KvCacheCreator`` in
``tensorrt_llm/_torch/pyexecutor/_util.py``, read at mikeiovine/TensorRT-LLM 89f86ece, and
``py_executor_creator.py`` at 550635b8): it loads the weights, builds an executor with a small KV
cache -- the cache transceiver and its transfer buffer included -- runs one forward pass of
``max_num_tokens`` tokens, takes the peak (torch's peak plus what is used outside torch: the CUDA
context, NCCL) and gives the KV cache ``free_gpu_memory_fraction`` x (total - peak). So the
fraction is of the memory *free after* weights, activations and the buffer, and everything
allocated later comes out of the rest, ``(1 - f) x free``: the decode's CUDA graphs (captured
again after the final KV cache), the caching allocator's growth and fragmentation, UCX and NCCL
buffers set up at the first transfer or collective.

pdtrt's estimate of that free memory is :mod:`pdtrt.facts.memory`'s (GPU memory - weights -
runtime reserve - activations) minus ``kv_transfer.buffer_size_bytes``; the runtime reserve
(3.5 GiB) is above what the CUDA context really takes, so the estimate is low and the headroom
below is a lower bound. With graphs ``G`` and a margin ``M`` the phase keeps

    (1 - f) x free - G >= M

which holds whether the graphs are inside TensorRT-LLM's measured peak or captured after it.
The computed fraction is ``1 - (M + G) / free`` rounded down to 0.01 and at most
:data:`MAX_FRACTION`; a spec's explicit fraction is kept and only noted when it leaves less.
Captured batch sizes are dropped, largest first, while their graphs would not fit beside a
spec's KV cache at all, or (computed fraction) would squeeze the KV cache below the
``max_seq_len`` sequences of their own batch -- a graph for a batch the cache cannot hold is
never replayed.

A spec's fraction that leaves less than the margin is a note, not a refusal: the margin is an
estimate pdtrt has not measured, and a user who set the value may have measured it on the GPU;
what cannot fit at all (no memory left after weights, activations, buffer and margin, or no
room for one sequence) is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.settings import EngineSettings, SettingSource
from pdtrt.blueprint.triton_models import param_number
from pdtrt.enums import Phase
from pdtrt.errors import BuildRejected
from pdtrt.facts.memory import GIB, cuda_graph_bytes, fit

__all__ = ["MARGIN_BYTES", "MAX_FRACTION", "PhaseMemory", "cuda_graph_batch_sizes",
           "memory_notes", "plan_memory"]

# Left unallocated per GPU after the KV cache and the graphs: what 1.2 allocates after its
# measurement besides graphs (the allocator's growth and fragmentation, UCX/NCCL buffers). vLLM
# PR #51590 reports a process that ended 1.37 GiB above its profiled budget with only 62 MiB of
# it in CUDA graphs; 2 GiB rounds that up. An estimate, not measured by pdtrt on a GPU.
MARGIN_BYTES = 2 * GIB
# The highest computed fraction: NVIDIA's published TensorRT-LLM throughput runs use 0.95, and
# 0.90 where 0.95 ran out of memory (benchmarks/published/trtllm_perf_overview.yaml).
MAX_FRACTION = 0.95


def cuda_graph_batch_sizes(max_batch_size: int) -> tuple[int, ...]:
    """Powers of two below ``max_batch_size``, and ``max_batch_size`` itself."""
    sizes = []
    size = 1
    while size < max_batch_size:
        sizes.append(size)
        size *= 2
    return (*sizes, max_batch_size)


def _gib(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass(frozen=True, kw_only=True)
class PhaseMemory:
    """One GPU of a phase: pdtrt's free-memory estimate and what the options make of it."""

    phase: Phase
    free_bytes: int  # what TensorRT-LLM should find free after weights, activations, buffer
    free_why: str  # the subtraction behind free_bytes
    fraction: float
    fraction_source: SettingSource
    graph_sizes: tuple[int, ...]
    graph_bytes: int
    dropped_sizes: tuple[int, ...]  # captured sizes left out so the graphs fit
    seq_bytes: int  # KV of one max_seq_len sequence on this rank

    @property
    def kv_bytes(self) -> int:
        return int(self.free_bytes * self.fraction)

    @property
    def headroom_bytes(self) -> int:
        """Left after the KV cache and the graphs (the margin is the least it should be)."""
        return self.free_bytes - self.kv_bytes - self.graph_bytes

    def arithmetic(self) -> str:
        """KV = fraction x free, and what it leaves, in GiB."""
        return (f"KV {param_number(self.fraction)} x {_gib(self.free_bytes)} free "
                f"({self.free_why}) = {_gib(self.kv_bytes)}, leaving "
                f"{_gib(self.free_bytes - self.kv_bytes)}: CUDA graphs {_gib(self.graph_bytes)} "
                f"+ {_gib(self.headroom_bytes)} (margin {_gib(MARGIN_BYTES)})")

    def computed(self) -> str:
        """How the computed fraction follows from the free memory, graphs and margin."""
        raw = 1 - (MARGIN_BYTES + self.graph_bytes) / self.free_bytes
        return (f"1 - (margin {_gib(MARGIN_BYTES)} + CUDA graphs {_gib(self.graph_bytes)}) / "
                f"{_gib(self.free_bytes)} free = {raw:.3f}, rounded down to 0.01, at most "
                f"{param_number(MAX_FRACTION)} (NVIDIA's benchmark setting)")


def _free(dep: Deployment, phase: Phase, settings: EngineSettings, *, transfers: bool = True
          ) -> tuple[int, str, int]:
    """(free bytes, the arithmetic, one max_seq_len sequence's KV bytes) of one GPU;
    ``transfers``: it holds the KV-transfer buffer."""
    spec, pool, gpu = dep.spec, dep.spec.pool(phase), dep.gpus[phase]
    seq_len = int(settings["max_seq_len"])
    mem = fit(dep.model, gpu, tp=pool.tp, pp=pool.pp, seq_len=seq_len, dtype=spec.model.dtype,
              weights=spec.weights(phase), kv_dtype=spec.kv_cache_dtype(phase),
              max_num_tokens=int(settings["max_num_tokens"]),
              tokens_per_block=int(settings["tokens_per_block"]))
    buffer = spec.kv_transfer.buffer_size_bytes if transfers else 0
    free = mem.free_bytes - buffer
    why = (f"{gpu.key} {_gib(mem.memory_bytes)} - weights {_gib(mem.weight_bytes)} - runtime "
           f"{_gib(mem.runtime_reserve_bytes)} - activations {_gib(mem.activation_bytes)}"
           + (f" - transfer buffer {_gib(buffer)}" if transfers else ""))
    return free, why, mem.blocks_per_seq * mem.tokens_per_block * mem.kv_bytes_per_token


def _computed_fraction(free: int, graphs: int) -> float:
    return min(MAX_FRACTION, math.floor((1 - (MARGIN_BYTES + graphs) / free) * 100) / 100)


def _fit_graphs(dep: Deployment, phase: Phase, wanted: tuple[int, ...], *, free: int,
                seq_bytes: int, explicit: float | None) -> tuple[float, tuple[int, ...], int]:
    """(fraction, captured sizes, their bytes): ``wanted`` less its largest sizes while their
    graphs do not fit beside the spec's (``explicit``) KV cache, or push the computed fraction's
    KV cache below the sequences of the largest batch."""
    sizes = wanted
    while True:
        graphs = cuda_graph_bytes(dep.model, sizes, dtype=dep.spec.model.dtype,
                                  tp=dep.spec.pool(phase).tp)
        fraction = explicit if explicit is not None else _computed_fraction(free, graphs)
        kv = int(free * fraction)
        fits = (free - kv >= graphs if explicit is not None  # the margin is only noted
                else kv // seq_bytes >= (sizes[-1] if sizes else 1))
        if fits or not sizes:
            return fraction, sizes, graphs
        sizes = sizes[:-1]


def plan_memory(dep: Deployment, phase: Phase, settings: EngineSettings, *,
                aggregated: bool = False) -> PhaseMemory:
    """The KV fraction and CUDA-graph sizes of ``phase`` on one of its GPUs (``aggregated``:
    the aggregated baseline on the prefill's GPU, which captures graphs and transfers no KV).

    Raises :class:`BuildRejected` when the GPU has no room for a KV cache after the weights,
    activations, transfer buffer and margin, or when the fraction leaves no room for one
    ``max_seq_len`` sequence.
    """
    free, free_why, seq_bytes = _free(dep, phase, settings, transfers=not aggregated)
    engine = dep.spec.pool(phase).engine
    key = f"{phase}.engine.kv_cache_free_gpu_mem_fraction"
    if free < MARGIN_BYTES:
        raise BuildRejected([
            f"{phase}: {_gib(free)} free ({free_why}) is less than the {_gib(MARGIN_BYTES)} "
            "margin: no room for a KV cache on this GPU; use one with more memory, FP8 "
            "weights, a larger TP, or a smaller kv_transfer.buffer_size_bytes or "
            "max_num_tokens"])
    wanted = (cuda_graph_batch_sizes(int(settings["max_batch_size"]))
              if phase is Phase.DECODE or aggregated else ())
    explicit = "kv_cache_free_gpu_mem_fraction" in engine.model_fields_set
    fraction, sizes, graphs = _fit_graphs(
        dep, phase, wanted, free=free, seq_bytes=seq_bytes,
        explicit=engine.kv_cache_free_gpu_mem_fraction if explicit else None)
    memory = PhaseMemory(phase=phase, free_bytes=free, free_why=free_why, fraction=fraction,
                         fraction_source=SettingSource.SPEC if explicit else SettingSource.COMPUTED,
                         graph_sizes=sizes, graph_bytes=graphs,
                         dropped_sizes=wanted[len(sizes):], seq_bytes=seq_bytes)
    if memory.kv_bytes < seq_bytes:
        raise BuildRejected([
            f"{phase}: {memory.arithmetic()}; one max_seq_len "
            f"{int(settings['max_seq_len'])} sequence needs {_gib(seq_bytes)}"
            + (f" ({key} is the spec's)" if explicit else "")
            + "; use a GPU with more memory, FP8 KV or weights, a larger TP, or a shorter "
            "max_seq_len"])
    return memory


def memory_notes(memory: PhaseMemory) -> tuple[str, ...]:
    """Warnings for ``pdtrt build``: a spec fraction that leaves less than the margin, sizes
    whose graphs do not fit."""
    notes = []
    phase = memory.phase
    if memory.fraction_source is SettingSource.SPEC and memory.headroom_bytes < MARGIN_BYTES:
        better = _computed_fraction(memory.free_bytes, memory.graph_bytes)
        notes.append(
            f"{phase}: {phase}.engine.kv_cache_free_gpu_mem_fraction "
            f"{param_number(memory.fraction)} (the spec's, kept): {memory.arithmetic()}: less "
            f"than the margin, so an allocation after the KV cache may run out of memory; "
            f"pdtrt's estimate would give {param_number(better)} (omit the key to use it)")
    if memory.dropped_sizes:
        notes.append(
            f"{phase}: no CUDA graphs for batch sizes "
            f"{','.join(map(str, memory.dropped_sizes))}: their graphs would not fit beside "
            "the KV cache (such batches run eagerly)")
    return tuple(notes)
