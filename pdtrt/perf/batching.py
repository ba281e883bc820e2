"""How prompts share an engine's steps at a given request rate (in-flight batching).

TensorRT-LLM's micro-batch scheduler puts every schedulable request into the next step until
the step holds ``max_num_tokens`` tokens or ``max_batch_size`` requests, generation requests
first, then context requests (whole, or chunked when the prompt does not fit)
(``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``, NVIDIA/TensorRT-LLM at
0a949d3128bfaf4ddedefb0259125622a9ec830f: ``MicroBatchScheduler::operator()`` counts
``batchNumTokens`` against ``maxNumTokensRuntime`` and ``scheduledReqSize`` against
``maxBatchSizeRuntime``). So prompts waiting together are prefilled *in one step*, and a
step's fixed costs -- reading the weights, launching its kernels, the scheduler's own
iteration -- are paid once per step, however many prompts it carries.

The model. A step carrying prompt tokens (a *prompt step*) also carries one token for each of
the ``B`` running decodes. With ``n`` prompts of ``isl`` tokens each, its time is
``T(n) = step_time(decode B + n prompts)`` (linear between whole prompts). At ``r`` prompts
per second:

- **batchable prompts** (``isl + B <= max_num_tokens``): groups of ``n`` prompts go through
  one step each; at least the prompts that arrive together (``burst``) share a step, and when
  prompts arrive faster than one group per step, every step carries the prompts that arrived
  during the step before: ``n = r T(n)`` (solved by bisection), so the engine runs prompt
  steps back to back and each prompt's share of a step shrinks as ``n`` grows. Unstable when
  even the fullest step (``n_max`` prompts: the token budget or the batch-size slots left by
  the decodes) cannot keep up, ``r T(n_max) > n_max``. A prompt arriving during a step waits
  for it to end (half a step on average) and is then prefilled in the next one -- it never
  queues behind other prompts' steps while the budget has room.
- **chunked prompts** (``isl + B > max_num_tokens``): one prompt's chunk per step, ``k``
  steps per prompt, prompts one after another (an M^X/D/1 queue of service ``k`` steps;
  :mod:`pdtrt.perf.queueing`).

``service_s`` is the engine time one prompt accounts for (``k T / n``) and ``busy = r
service_s`` the share of time spent in prompt steps (1 once every step carries prompts);
``utilisation`` is the rate over the most prompts per second the steps can take (``n_max /
T(n_max)`` batched, ``1 / service_s`` chunked): prompts queue only as it nears 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.queueing import mxd1_wait_p90_s, mxd1_wait_s
from pdtrt.perf.step import StepWork, prefill_chunk_work, step_time

__all__ = ["PromptSteps", "prompt_steps"]

_BISECTION_STEPS = 50
_NO_DECODE = StepWork()


@dataclass(frozen=True, kw_only=True)
class PromptSteps:
    """Prompts in an engine's steps at one rate (module doc). Times in seconds."""

    prompts_per_step: float  # n: prompts sharing one prompt step (1 when chunked)
    steps: int  # k: prompt steps one prompt's prefill spans
    step_s: float  # mean time of a prompt step
    longest_s: float  # the longest prompt step
    service_s: float  # engine time one prompt accounts for: k T / n
    busy: float  # share of engine time in prompt steps: r service_s
    utilisation: float  # r over the most prompts per second the steps can take
    latency_s: float  # from the start of a prompt's first step to its first token
    latency_p90_s: float  # ... its p90 (burst-mates served in later steps)
    wait_s: float  # mean wait before a prompt's first step
    wait_p90_s: float
    batched: bool  # prompts share steps (False: chunked, one after another)
    stable: bool


def _whole_prompts(decode: StepWork, n: int, isl: int) -> StepWork:
    work = decode
    for _ in range(n):
        work = work + prefill_chunk_work(isl)
    return work


def _batched(inst: Instance, f: EfficiencyFactors, *, isl: int, rate_per_s: float,
             decode: StepWork, n_max: int, burst: float) -> PromptSteps:
    cache: dict[int, float] = {}

    def t_whole(n: int) -> float:
        if n not in cache:
            cache[n] = step_time(_whole_prompts(decode, n, isl), inst, f).total_s
        return cache[n]

    def t(n: float) -> float:
        lo = min(max(int(math.floor(n)), 1), n_max)
        hi = min(lo + 1, n_max)
        return t_whole(lo) + (n - lo) * (t_whole(hi) - t_whole(lo)) if hi > lo else t_whole(lo)

    r = rate_per_s
    b = max(burst, 1.0)
    n = min(b, float(n_max))
    groups = b / n  # a burst larger than a step is prefilled a step-full after another
    if r * t(n) > n:  # prompts arrive faster than one group per step: steps fill up
        if r * t(n_max) > n_max:
            return PromptSteps(prompts_per_step=n_max, steps=1, step_s=t(n_max),
                               longest_s=t(n_max), service_s=t(n_max) / n_max, busy=1.0,
                               utilisation=r * t(n_max) / n_max, latency_s=math.inf,
                               latency_p90_s=math.inf, wait_s=math.inf, wait_p90_s=math.inf,
                               batched=True, stable=False)
        lo, hi = n, float(n_max)
        for _ in range(_BISECTION_STEPS):
            mid = (lo + hi) / 2
            if r * t(mid) > mid:
                lo = mid
            else:
                hi = mid
        n = hi
    step = t(n)
    busy = min(r * step / n, 1.0)
    # arriving during a prompt step: wait for its end (the residual of a deterministic step)
    wait = busy * step / 2
    return PromptSteps(prompts_per_step=n, steps=1, step_s=step, longest_s=t_whole(
        min(math.ceil(n), n_max)), service_s=step / n, busy=busy,
        utilisation=r * t(n_max) / n_max, latency_s=step * (1.0 + (groups - 1.0) / 2.0),
        latency_p90_s=step * (1.0 + max(0.9 * groups - 1.0, 0.0)), wait_s=wait,
        wait_p90_s=step if busy > 0.1 else 0.0, batched=True, stable=True)


def _chunked(inst: Instance, f: EfficiencyFactors, *, isl: int, rate_per_s: float,
             decode: StepWork, budget: int, burst: float) -> PromptSteps:
    total, done, chunks, longest = 0.0, 0, 0, 0.0
    while done < isl:
        c = min(budget, isl - done)
        s = step_time(decode + prefill_chunk_work(c, done, last=done + c == isl), inst,
                      f).total_s
        total, done, chunks, longest = total + s, done + c, chunks + 1, max(longest, s)
    busy = rate_per_s * total
    return PromptSteps(prompts_per_step=1.0, steps=chunks, step_s=total / chunks,
                       longest_s=longest, service_s=total, busy=min(busy, 1.0),
                       utilisation=busy,
                       latency_s=total, latency_p90_s=total,
                       wait_s=mxd1_wait_s(busy, total, burst),
                       wait_p90_s=mxd1_wait_p90_s(busy, total, burst), batched=False,
                       stable=busy < 1)


def prompt_steps(inst: Instance, f: EfficiencyFactors, *, isl: int, rate_per_s: float,
                 decode: StepWork = _NO_DECODE, burst: float = 1.0) -> PromptSteps:
    """How prompts of ``isl`` tokens arriving at ``rate_per_s`` (in groups of ``burst``) go
    through the steps of ``inst``, each step also carrying ``decode`` (module doc)."""
    budget = max(1, inst.max_num_tokens - decode.decode_seqs)
    slots = inst.max_batch_size - decode.decode_seqs
    n_max = min(budget // isl, slots)
    if n_max >= 1:
        return _batched(inst, f, isl=isl, rate_per_s=rate_per_s, decode=decode, n_max=n_max,
                        burst=burst)
    return _chunked(inst, f, isl=isl, rate_per_s=rate_per_s, decode=decode, budget=budget,
                    burst=burst)
