"""Time of one engine iteration ("step"): prefill chunks and decode tokens batched together.

One formula covers prefill-only, decode-only and mixed (aggregated, inflight-batched) steps. A
step is described by :class:`StepWork`. With kernel curves (:mod:`pdtrt.perf.kernels`, the
default for TensorRT-LLM) a step is the sum of its kernels on one rank, per layer::

    M           = prefill_tokens + decode_seqs                        (tokens in the step)
    gemm_s      = L * sum over qkv, o, gate-up, down of t(M, N, K) + t_bf16(logits, V/tp, h)
    t(M, N, K)  = max(2 M N K / (peak_dtype * gemm_eff(M, N, K)),     (measured curve)
                      N K weight_bytes / (bandwidth * weight_stream_bw_eff))   (DRAM floor)
    attention_s = L * [4 d_q/tp * prefill_pairs / (attn_peak * ctx_eff(len, seqs*heads/tp))
                       + kv_bytes_read / (bandwidth * min(gen_eff(context, seqs*kv_heads/tp),
                                                          weight_stream_bw_eff))]
    elementwise_s = L * M * elementwise_bytes_per_token / (bandwidth * weight_stream_bw_eff)
    comm_s      = 2 L * allreduce_s(tp, M h act_bytes)                 (tp > 1, measured curve)
                  + (pp-1) [allreduce_latency + M h bytes / gpu_link]  (pp > 1)
    memory_s    = (weights/tp + kv_bytes_per_token_per_tp_rank * kv_tokens_touched)
                  / (bandwidth * weight_stream_bw_eff)                 (a floor; rarely binds)
    overhead_s  = step_overhead_s + prefill_seqs * prefill_seq_overhead_s
                  + L * [eager_layer_overhead_s + tp_sync_layer_s log2(tp)]  (eager steps only)
    step_s      = max(gemm_s + attention_s + elementwise_s, memory_s) + comm_s + overhead_s

The per-rank GEMM shapes are ``N x K`` = ``(d_q + 2 d_kv)/tp x h``, ``h x d_q/tp``,
``2 i/tp x h`` and ``h x i/tp``. Elementwise traffic per token and layer (two RMSNorms with the
residual adds fused into them, the gated activation) is ``act_bytes (8 h + 3 i/tp)``; RoPE and
the KV-cache write are part of the measured attention kernels.
TensorRT-LLM replays decode-only steps of up to :data:`CUDA_GRAPH_MAX_BATCH` sequences from
CUDA graphs; every other step is launched eagerly and pays ``eager_layer_overhead_s`` per layer.

Without curves (other backends, or GPUs no measured GPU of the same architecture covers) the
scalar model is used::

    gemm_s      = (2 P tokens + 2 V h logits) / (tp * peak * gemm_eff)
    attention_s = 4 L d_q (prefill_pairs + decode_context) / (tp * attn_peak * attention_eff)
    memory_s    = (weights / tp + kv_bytes_per_token_per_tp_rank * kv_tokens_touched)
                  / (bandwidth * bandwidth_eff)
    comm_s      = 2 L [allreduce_latency + 2 (tp-1)/tp * tokens h bytes / gpu_link]   (tp > 1)
                  + (pp-1) [allreduce_latency + tokens h bytes / gpu_link]          (pp > 1)
    step_s      = max(gemm_s + attention_s, memory_s) + comm_s + overhead_s

``prefill_pairs`` counts causal (query, key) pairs: a chunk of ``c`` tokens after ``p`` cached
ones has ``c*p + c(c+1)/2``, so attention grows quadratically with the prompt. ``peak`` is the
FP8 peak only with FP8 weights (:attr:`Instance.peak_flops_per_s`). Pipeline parallelism splits
the layers into stages run one after another, so it adds memory, not speed, to one step's
latency (pipelined micro-batches are not modelled). A prompt longer than ``max_num_tokens`` is
prefilled in chunks, one step each (:func:`prefill_time_s`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.kernels import GpuKernels, LogGrid, gemm_dtype, kv_attention_dtype, resolve

__all__ = ["CUDA_GRAPH_MAX_BATCH", "StepTime", "StepWork", "decode_step_s", "decode_work",
           "prefill_chunk_work", "prefill_time_s", "step_time"]

# TensorRT-LLM's PyTorch flow captures CUDA graphs for decode-only batches up to this size by
# default (CudaGraphConfig batch sizes 1..128); larger batches and prefill steps run eagerly.
CUDA_GRAPH_MAX_BATCH = 128


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What one step computes. Counts are summed over the sequences in the step."""

    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_context_tokens: int = 0
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_context_tokens: int = 0
    logits: int = 0

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(
            prefill_tokens=self.prefill_tokens + other.prefill_tokens,
            prefill_pairs=self.prefill_pairs + other.prefill_pairs,
            prefill_context_tokens=self.prefill_context_tokens + other.prefill_context_tokens,
            prefill_seqs=self.prefill_seqs + other.prefill_seqs,
            decode_seqs=self.decode_seqs + other.decode_seqs,
            decode_context_tokens=self.decode_context_tokens + other.decode_context_tokens,
            logits=self.logits + other.logits,
        )

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_seqs


def prefill_chunk_work(chunk_tokens: int, prior_tokens: int = 0, *, last: bool = True) -> StepWork:
    """A prefill chunk of ``chunk_tokens`` after ``prior_tokens`` already in the KV cache;
    ``last`` chunks produce the first output token (one LM-head row)."""
    c, p = chunk_tokens, prior_tokens
    return StepWork(prefill_tokens=c, prefill_pairs=c * p + c * (c + 1) / 2,
                    prefill_context_tokens=p, prefill_seqs=1, logits=1 if last else 0)


def decode_work(num_seqs: int, context_tokens: int) -> StepWork:
    """``num_seqs`` sequences generating one token each, attending to ``context_tokens`` cached
    tokens in total (summed over the sequences)."""
    return StepWork(decode_seqs=num_seqs, decode_context_tokens=context_tokens, logits=num_seqs)


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """A step's time and its parts, in seconds."""

    gemm_s: float
    attention_s: float
    memory_s: float
    comm_s: float
    overhead_s: float
    elementwise_s: float = 0.0

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s

    @property
    def total_s(self) -> float:
        return max(self.compute_s, self.memory_s) + self.comm_s + self.overhead_s

    @property
    def bound(self) -> str:
        """What dominates the step: compute, memory, communication or overhead."""
        parts = {"compute": self.compute_s, "memory": self.memory_s,
                 "communication": self.comm_s, "overhead": self.overhead_s}
        return max(parts, key=parts.__getitem__)


def _link_bytes_per_s(inst: Instance) -> float:
    return inst.gpu.gpu_link_bytes_per_s or inst.gpu.host_link_bytes_per_s


def _pp_comm_s(inst: Instance, f: EfficiencyFactors, payload: float) -> float:
    if inst.pp == 1:
        return 0.0
    return (inst.pp - 1) * (f.allreduce_latency_s + payload / _link_bytes_per_s(inst))


def _overhead_s(work: StepWork, inst: Instance, f: EfficiencyFactors) -> float:
    eager = work.prefill_tokens > 0 or work.decode_seqs > CUDA_GRAPH_MAX_BATCH
    fixed = f.step_overhead_s + f.prefill_seq_overhead_s * work.prefill_seqs
    if not eager:
        return fixed
    per_layer = f.eager_layer_overhead_s + f.tp_sync_layer_s * math.log2(inst.tp)
    return fixed + inst.model.num_layers * per_layer


def _scalar_step(work: StepWork, inst: Instance, f: EfficiencyFactors) -> StepTime:
    m = inst.model
    tp = inst.tp
    gemm_flops = 2.0 * m.num_layer_linear_params * work.tokens
    gemm_flops += 2.0 * m.vocab_size * m.hidden_size * work.logits
    attn_flops = 4.0 * m.num_layers * m.q_dim * (work.prefill_pairs + work.decode_context_tokens)
    gemm_s = gemm_flops / (tp * inst.peak_flops_per_s * f.gemm_eff)
    attention_s = attn_flops / (tp * inst.attention_peak_flops_per_s * f.attention_eff)
    memory_s = _bytes_read(work, inst) / (inst.gpu.memory_bw_bytes_per_s * f.bandwidth_eff)
    payload = work.tokens * inst.activation_bytes_per_token
    comm_s = 0.0
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp * payload / _link_bytes_per_s(inst)
        comm_s += 2 * m.num_layers * (f.allreduce_latency_s + ring)
    comm_s += _pp_comm_s(inst, f, payload)
    return StepTime(gemm_s=gemm_s, attention_s=attention_s, memory_s=memory_s, comm_s=comm_s,
                    overhead_s=_overhead_s(work, inst, f))


def _bytes_read(work: StepWork, inst: Instance) -> float:
    kv_tokens = work.decode_context_tokens + work.prefill_context_tokens + work.tokens
    return (inst.weight_read_bytes_per_gpu * inst.pp
            + inst.kv_bytes_per_token * inst.pp * kv_tokens)


@lru_cache(maxsize=65536)
def _gemm_s(grid: LogGrid, m: int, n: int, k: int, peak: float, floor_s_per_elem: float) -> float:
    """One GEMM on the measured curve, never faster than streaming its weights from DRAM."""
    if m <= 0:
        return 0.0
    return max(2.0 * m * n * k / (peak * grid(m, n, k)), n * k * floor_s_per_elem)


def _curve_step(work: StepWork, inst: Instance, f: EfficiencyFactors, k: GpuKernels) -> StepTime:
    md, gpu = inst.model, inst.gpu
    tp, layers, h = inst.tp, md.num_layers, md.hidden_size
    bw = gpu.memory_bw_bytes_per_s
    dt = gemm_dtype(inst.weights) if gemm_dtype(inst.weights) in k.gemm else "bf16"
    peak = inst.peak_flops_per_s if dt == "fp8" else gpu.bf16_dense_flops_per_s
    stream = k.weight_stream_bw_eff[dt]
    wbytes = inst.weights.bytes_per_param(inst.dtype)
    floor = wbytes / (bw * stream)
    grid, m_tok = k.gemm[dt], work.tokens
    q, kv, ffn = md.q_dim // tp, md.kv_dim // tp, md.intermediate_size // tp
    layer = (_gemm_s(grid, m_tok, q + 2 * kv, h, peak, floor)
             + _gemm_s(grid, m_tok, h, q, peak, floor)
             + _gemm_s(grid, m_tok, 2 * ffn, h, peak, floor)
             + _gemm_s(grid, m_tok, h, ffn, peak, floor))
    bf16 = k.gemm["bf16"]
    lm_floor = inst.dtype.num_bytes / (bw * k.weight_stream_bw_eff["bf16"])
    gemm_s = layers * layer + _gemm_s(bf16, work.logits, md.vocab_size // tp, h,
                                      gpu.bf16_dense_flops_per_s, lm_floor)
    attention_s = layers * _attention_layer_s(work, inst, k)
    per_token = inst.dtype.num_bytes * (8 * h + 3 * ffn)
    elementwise_s = layers * m_tok * per_token / (bw * k.weight_stream_bw_eff["bf16"])
    payload = m_tok * inst.activation_bytes_per_token
    comm_s = 2 * layers * k.allreduce_s(tp, payload) if tp > 1 and m_tok else 0.0
    comm_s += _pp_comm_s(inst, f, payload)
    memory_s = _bytes_read(work, inst) / (bw * stream)
    return StepTime(gemm_s=gemm_s, attention_s=attention_s, memory_s=memory_s, comm_s=comm_s,
                    overhead_s=_overhead_s(work, inst, f), elementwise_s=elementwise_s)


def _attention_layer_s(work: StepWork, inst: Instance, k: GpuKernels) -> float:
    md, gpu, tp = inst.model, inst.gpu, inst.tp
    kv_key = kv_attention_dtype(inst.kv_dtype)
    t = 0.0
    if work.prefill_tokens:
        ctx = k.context_attention.get(kv_key) or k.context_attention["bf16"]
        peak = inst.attention_peak_flops_per_s if kv_key in k.context_attention \
            else gpu.bf16_dense_flops_per_s
        seqs = max(work.prefill_seqs, 1)
        length = (work.prefill_tokens + work.prefill_context_tokens) / seqs
        heads = max(md.num_heads // tp, 1)
        flops = 4.0 * heads * md.head_dim * work.prefill_pairs
        t += flops / (peak * ctx(length, seqs * heads))
    if work.decode_seqs:
        gen = k.generation_attention.get(kv_key) or k.generation_attention["bf16"]
        kv_heads = max(md.num_kv_heads // tp, 1)
        context = max(work.decode_context_tokens / work.decode_seqs, 1.0)
        kv_bytes = (work.decode_context_tokens * 2 * kv_heads * md.head_dim
                    * inst.kv_dtype.num_bytes)
        # a benchmark that re-reads one layer's KV finds it in L2; a model's layers do not
        eff = min(gen(context, work.decode_seqs * kv_heads), k.weight_stream_bw_eff["bf16"])
        t += kv_bytes / (gpu.memory_bw_bytes_per_s * eff)
    return t


@lru_cache(maxsize=1 << 16)
def step_time(work: StepWork, inst: Instance, f: EfficiencyFactors) -> StepTime:
    """Time of one step of ``work`` on ``inst`` with efficiency factors ``f`` (module doc).
    Pure, so cached: the operating-point searches ask for the same steps many times."""
    if f.kernels is not None:
        curves, _ = resolve(f.kernels, inst.gpu)
        if curves is not None:
            return _curve_step(work, inst, f, curves)
    return _scalar_step(work, inst, f)


def prefill_time_s(inst: Instance, f: EfficiencyFactors, num_tokens: int,
                   *, chunk_tokens: int | None = None) -> float:
    """Time to prefill one prompt of ``num_tokens`` alone, in chunks of at most
    ``chunk_tokens`` (default ``inst.max_num_tokens``), one step per chunk."""
    chunk = max(1, chunk_tokens or inst.max_num_tokens)
    total, done = 0.0, 0
    while done < num_tokens:
        c = min(chunk, num_tokens - done)
        work = prefill_chunk_work(c, done, last=done + c == num_tokens)
        total += step_time(work, inst, f).total_s
        done += c
    return total


def decode_step_s(inst: Instance, f: EfficiencyFactors, num_seqs: int,
                  context_tokens_per_seq: float) -> float:
    """Time of one decode step of ``num_seqs`` sequences at an average context length."""
    work = decode_work(num_seqs, int(round(num_seqs * context_tokens_per_seq)))
    return step_time(work, inst, f).total_s
