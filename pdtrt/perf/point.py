"""The steady-state operating point of a deployment at a given request rate (analytical).

Aggregated serving (inflight batching, one instance serving both phases): prompts go through
*prompt steps* -- ``n`` prompts (or one prompt's chunk) plus one decode token for every
running sequence, time ``T(n, B)`` -- as :mod:`pdtrt.perf.batching` packs them: ``n`` is the
prompts that arrived together or, once prompts arrive faster than a step, those that arrived
during the step before; a prompt spans ``k`` steps (1 unless chunked). The other steps are
pure decode steps of ``B`` sequences, ``tau_d(B)``. At ``r`` requests/s per instance the
engine runs ``r k / n`` prompt steps per second, spends ``busy = r k T / n`` of each second in
them and fills the rest with decode steps, so a decoding sequence sees
``r k / n + (1 - busy) / tau_d`` steps per second::

    TPOT = 1 / (r k / n + (1 - busy) / tau_d(B)),   B = r (osl - 1) TPOT   (Little's law)
    TTFT = k T (+ the step-fulls of a burst ahead of it) + the wait for the step in progress

Short prompts share a step, so its fixed costs (weights, launches, the scheduler) are paid
once for all of them; at high rates every step carries prompts and ``TPOT = T(n, B)``. A
prompt still stalls the decodes of its step (head-of-line blocking): ``T(n, B) > tau_d(B)``.
The p90 of a request's TPOT counts the prompt steps in its decode window as a Poisson number.

Disaggregated serving: prefill instances run prompt steps (the same packing, no decodes), the
KV crosses the link (M/D/1 on the link, ``min(A, B)`` links in parallel), and decode
instances run pure decode steps. The first token comes from the prefill (pdtrt's router
streams it at once), so the KV transfer and the join wait are paid by the second token and
spread over the request's TPOT.

A point is *unstable* when a utilisation reaches 1 or the decode batch exceeds what the KV
cache (or ``max_batch_size``) holds under the instance's capacity policy
(:func:`pdtrt.perf.scheduling.running_capacity`); its latencies are then ``inf``. ``burst``
is how many prompts reach the engine together (1: independent arrivals; see
:mod:`pdtrt.perf.scheduling`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdtrt.perf.batching import PromptSteps, prompt_steps
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import KVLink, kv_transfer_s
from pdtrt.perf.queueing import md1_wait_p90_s, md1_wait_s, poisson_quantile
from pdtrt.perf.scheduling import running_capacity
from pdtrt.perf.step import decode_work, prefill_time_s, step_time

__all__ = ["OperatingPoint", "aggregated_point", "disaggregated_point"]

_FIXED_POINT_ITERS = 60


@dataclass(frozen=True, kw_only=True)
class OperatingPoint:
    """Latencies (s) and loads at one request rate. ``bottleneck`` names the limiting part."""

    rate_per_s: float
    ttft_s: float
    ttft_p90_s: float
    tpot_s: float
    tpot_p90_s: float
    itl_p90_s: float
    decode_batch: float
    prefill_util: float
    decode_util: float
    link_util: float
    prefill_service_s: float
    decode_step_s: float
    kv_transfer_s: float
    max_decode_batch: int
    stable: bool
    bottleneck: str

    @property
    def e2e_s(self) -> float:
        return self.ttft_s + self.tpot_s * max(self.osl_minus_one, 0)

    osl_minus_one: int = 0
    # engine time one prompt accounts for: its share of the prompt steps it rides in
    # (:mod:`pdtrt.perf.batching`); what closed-loop queueing (pdtrt.perf.closed_loop) is made of
    prompt_service_s: float = 0.0
    join_s: float = 0.0  # half a step spent joining a running batch, part of TTFT
    # a prompt's own time at the prompt server with its burst-mates, and its p90 (the
    # closed loop's minimum response; pdtrt.perf.batching)
    prompt_latency_s: float = 0.0
    prompt_latency_p90_s: float = 0.0
    prompts_per_step: float = 1.0  # prompts sharing one prompt step
    prompt_util: float = 0.0  # the rate over the most prompts per second the engine takes


def _unstable(rate: float, why: str, **kw: float) -> OperatingPoint:
    base = dict(ttft_s=math.inf, ttft_p90_s=math.inf, tpot_s=math.inf, tpot_p90_s=math.inf,
                itl_p90_s=math.inf, decode_batch=math.inf, prefill_util=1.0, decode_util=1.0,
                link_util=0.0, prefill_service_s=math.inf, decode_step_s=math.inf,
                kv_transfer_s=0.0, max_decode_batch=0)
    base.update(kw)
    return OperatingPoint(rate_per_s=rate, stable=False, bottleneck=why, **base)  # type: ignore


def aggregated_point(inst: Instance, f: EfficiencyFactors, *, isl: int, osl: int,
                     rate_per_s: float, burst: float = 1.0) -> OperatingPoint:
    """Operating point of one aggregated instance at ``rate_per_s`` requests/s."""
    r, n_dec = rate_per_s, max(osl - 1, 0)
    context = isl + osl / 2
    max_batch = running_capacity(inst, isl, osl).seqs
    if max_batch < 1:
        return _unstable(r, "memory: not one sequence fits", max_decode_batch=0)
    batch, tpot = 0.0, 0.0
    for _ in range(_FIXED_POINT_ITERS):
        b_obs = int(math.ceil(max(batch, 1.0)))
        tau_d = step_time(decode_work(b_obs, int(round(b_obs * context))), inst, f).total_s
        b = int(math.ceil(batch))
        ps = prompt_steps(inst, f, isl=isl, rate_per_s=r, burst=burst,
                          decode=decode_work(b, int(round(b * context))))
        if not ps.stable:
            return _unstable(r, "prefill: prompt steps fill the engine",
                             max_decode_batch=max_batch, prefill_service_s=ps.service_s)
        prompt_steps_per_s = r * ps.steps / ps.prompts_per_step
        tpot = 1.0 / (prompt_steps_per_s + (1.0 - ps.busy) / tau_d)
        new_batch = r * n_dec * tpot
        if new_batch > max_batch:
            return _unstable(r, f"decode: batch {new_batch:.0f} > {max_batch} that fit",
                             max_decode_batch=max_batch, prefill_service_s=ps.service_s)
        if abs(new_batch - batch) < 1e-3:
            batch = new_batch
            break
        batch = new_batch
    share_mixed = prompt_steps_per_s * tpot  # share of steps that carry prompt tokens
    m90 = poisson_quantile(share_mixed * n_dec) if n_dec else 0.0
    tpot_p90 = tau_d + min(m90 / n_dec, 1.0) * (ps.step_s - tau_d) if n_dec else tpot
    # joining the running batch: the rest of the decode step in progress
    join = min(batch, 1.0) * (1.0 - ps.busy) * tau_d / 2
    decode_util = min(1.0, batch / max_batch)  # the running slots in use, as disaggregated
    bottleneck = ("prefill (prompt steps)" if ps.utilisation >= batch / max_batch
                  else "decode steps")
    return OperatingPoint(
        rate_per_s=r, ttft_s=f.request_overhead_s + ps.latency_s + ps.wait_s + join,
        ttft_p90_s=f.request_overhead_s + ps.latency_p90_s + ps.wait_p90_s + 2 * join,
        tpot_s=tpot, tpot_p90_s=max(tpot_p90, tpot),
        itl_p90_s=ps.longest_s if share_mixed > 0.1 else tau_d, decode_batch=batch,
        prefill_util=ps.busy, decode_util=decode_util, link_util=0.0,
        prefill_service_s=prefill_time_s(inst, f, isl), decode_step_s=tau_d,
        kv_transfer_s=0.0, max_decode_batch=max_batch, stable=True, bottleneck=bottleneck,
        osl_minus_one=n_dec, prompt_service_s=ps.service_s, join_s=join,
        prompts_per_step=ps.prompts_per_step, prompt_util=ps.utilisation,
        **_prompt_latency(ps, burst))


def _prompt_latency(ps: PromptSteps, burst: float) -> dict[str, float]:
    """A prompt's own time at the prompt server with its burst-mates (closed loop's minimum
    response): one shared step when batched, one after another when chunked."""
    if ps.batched:
        return {"prompt_latency_s": ps.latency_s, "prompt_latency_p90_s": ps.latency_p90_s}
    b = max(burst, 1.0)
    return {"prompt_latency_s": ps.service_s * (1.0 + (b - 1.0) / 2.0),
            "prompt_latency_p90_s": ps.service_s * (1.0 + max(0.9 * b - 1.0, 0.0))}


def disaggregated_point(prefill: Instance, decode: Instance, link: KVLink,
                        f_prefill: EfficiencyFactors, f_decode: EfficiencyFactors, *, isl: int,
                        osl: int, rate_per_s: float, prefill_instances: int,
                        decode_instances: int, burst: float = 1.0) -> OperatingPoint:
    """Operating point of ``prefill_instances`` + ``decode_instances`` at ``rate_per_s`` in all."""
    r, n_dec = rate_per_s, max(osl - 1, 0)
    t_pf = prefill_time_s(prefill, f_prefill, isl)
    ps = prompt_steps(prefill, f_prefill, isl=isl, rate_per_s=r / prefill_instances,
                      burst=burst)
    rho_p = r / prefill_instances * ps.service_s
    kv_bytes = prefill.model.kv_bytes_per_token(prefill.kv_dtype)
    t_kv = kv_transfer_s(link, isl, kv_bytes)
    links = min(prefill_instances, decode_instances)
    rho_l = r * t_kv / links
    max_batch = running_capacity(decode, isl, osl).seqs
    if max_batch < 1:
        return _unstable(r, "memory: not one sequence fits on decode", max_decode_batch=0)
    if not ps.stable:
        return _unstable(r, f"prefill: utilisation {ps.utilisation:.2f}", prefill_service_s=t_pf,
                         max_decode_batch=max_batch)
    if rho_l >= 1:
        return _unstable(r, f"KV link: utilisation {rho_l:.2f}", prefill_service_s=t_pf,
                         kv_transfer_s=t_kv, max_decode_batch=max_batch)
    r_dec = r / decode_instances
    context = isl + osl / 2
    wait_l = md1_wait_s(rho_l, t_kv)
    batch, tau_d = 0.0, 0.0
    for _ in range(_FIXED_POINT_ITERS):
        b = int(math.ceil(max(batch, 1.0)))
        tau_d = step_time(decode_work(b, int(round(b * context))), decode, f_decode).total_s
        hand_over = t_kv + wait_l + tau_d / 2
        new_batch = r_dec * (n_dec * tau_d + hand_over)
        if new_batch > max_batch:
            return _unstable(r, f"decode: batch {new_batch:.0f} > {max_batch} that fit",
                             prefill_service_s=t_pf, kv_transfer_s=t_kv,
                             max_decode_batch=max_batch)
        if abs(new_batch - batch) < 1e-3:
            batch = new_batch
            break
        batch = new_batch
    hand_over = t_kv + wait_l + tau_d / 2
    tpot = tau_d + (hand_over / n_dec if n_dec else 0.0)
    first_itl = tau_d + hand_over
    utils = {"prefill": ps.utilisation, "decode": min(1.0, batch / max_batch), "KV link": rho_l}
    return OperatingPoint(
        rate_per_s=r, ttft_s=f_prefill.request_overhead_s + ps.latency_s + ps.wait_s,
        ttft_p90_s=f_prefill.request_overhead_s + ps.latency_p90_s + ps.wait_p90_s,
        tpot_s=tpot,
        tpot_p90_s=tau_d + (t_kv + md1_wait_p90_s(rho_l, t_kv) + tau_d) / max(n_dec, 1),
        itl_p90_s=first_itl if n_dec and 1 / n_dec > 0.1 else tau_d,
        decode_batch=batch, prefill_util=rho_p, decode_util=utils["decode"], link_util=rho_l,
        prefill_service_s=t_pf, decode_step_s=tau_d, kv_transfer_s=t_kv,
        max_decode_batch=max_batch, stable=True, bottleneck=max(utils, key=utils.__getitem__),
        osl_minus_one=n_dec, prompt_service_s=ps.service_s,
        prompts_per_step=ps.prompts_per_step, prompt_util=ps.utilisation,
        **_prompt_latency(ps, burst))
