"""Time of one engine iteration ("step"): prefill chunks and decode tokens batched together.

One formula covers prefill-only, decode-only and mixed (aggregated, inflight-batched) steps. A
step is described by :class:`StepWork`; for an :class:`~pdtrt.perf.hardware.Instance` with
tensor parallelism ``tp`` (``P`` = layers' linear parameters, ``L`` layers, ``d_q`` query width,
``V`` vocabulary, ``h`` hidden size)::

    tokens      = prefill_tokens + decode_seqs
    gemm_s      = (2 P tokens + 2 V h logits) / (tp * peak * gemm_eff)
    attention_s = 4 L d_q (prefill_pairs + decode_context) / (tp * attn_peak * attention_eff)
    memory_s    = (weights / tp + kv_bytes_per_token_per_tp_rank * kv_tokens_touched)
                  / (bandwidth * bandwidth_eff)
    comm_s      = 2 L [allreduce_latency + 2 (tp-1)/tp * tokens h bytes / gpu_link]   (tp > 1)
                  + (pp-1) [allreduce_latency + tokens h bytes / gpu_link]          (pp > 1)
    step_s      = max(gemm_s + attention_s, memory_s) + comm_s + step_overhead_s

``prefill_pairs`` counts causal (query, key) pairs: a chunk of ``c`` tokens after ``p`` cached
ones has ``c*p + c(c+1)/2``, so attention grows quadratically with the prompt. ``peak`` is the
FP8 peak only with FP8 weights (:attr:`Instance.peak_flops_per_s`). Pipeline parallelism splits
the layers into stages run one after another, so it adds memory, not speed, to one step's
latency (pipelined micro-batches are not modelled). A prompt longer than ``max_num_tokens`` is
prefilled in chunks, one step each (:func:`prefill_time_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance

__all__ = ["StepTime", "StepWork", "decode_step_s", "decode_work", "prefill_chunk_work",
           "prefill_time_s", "step_time"]


@dataclass(frozen=True, kw_only=True)
class StepWork:
    """What one step computes. Counts are summed over the sequences in the step."""

    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_context_tokens: int = 0
    decode_seqs: int = 0
    decode_context_tokens: int = 0
    logits: int = 0

    def __add__(self, other: StepWork) -> StepWork:
        return StepWork(
            prefill_tokens=self.prefill_tokens + other.prefill_tokens,
            prefill_pairs=self.prefill_pairs + other.prefill_pairs,
            prefill_context_tokens=self.prefill_context_tokens + other.prefill_context_tokens,
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
                    prefill_context_tokens=p, logits=1 if last else 0)


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

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s

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


def step_time(work: StepWork, inst: Instance, f: EfficiencyFactors) -> StepTime:
    """Time of one step of ``work`` on ``inst`` with efficiency factors ``f``."""
    m = inst.model
    tp, pp = inst.tp, inst.pp
    gemm_flops = 2.0 * m.num_layer_linear_params * work.tokens
    gemm_flops += 2.0 * m.vocab_size * m.hidden_size * work.logits
    attn_flops = 4.0 * m.num_layers * m.q_dim * (work.prefill_pairs + work.decode_context_tokens)
    gemm_s = gemm_flops / (tp * inst.peak_flops_per_s * f.gemm_eff)
    attention_s = attn_flops / (tp * inst.attention_peak_flops_per_s * f.attention_eff)
    kv_tokens = work.decode_context_tokens + work.prefill_context_tokens + work.tokens
    bytes_read = inst.weight_read_bytes_per_gpu * pp + inst.kv_bytes_per_token * pp * kv_tokens
    memory_s = bytes_read / (inst.gpu.memory_bw_bytes_per_s * f.bandwidth_eff)
    payload = work.tokens * inst.activation_bytes_per_token
    comm_s = 0.0
    if tp > 1:
        ring = 2.0 * (tp - 1) / tp * payload / _link_bytes_per_s(inst)
        comm_s += 2 * m.num_layers * (f.allreduce_latency_s + ring)
    if pp > 1:
        comm_s += (pp - 1) * (f.allreduce_latency_s + payload / _link_bytes_per_s(inst))
    return StepTime(gemm_s=gemm_s, attention_s=attention_s, memory_s=memory_s, comm_s=comm_s,
                    overhead_s=f.step_overhead_s)


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
