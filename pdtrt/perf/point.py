"""The steady-state operating point of a deployment at a given request rate (analytical).

Aggregated serving (inflight batching, one instance serving both phases): each request costs
``k = ceil(isl / max_num_tokens)`` *mixed* steps -- a prefill chunk plus one decode token for
every running sequence -- whose total is ``T_m(B)``; the other steps are pure decode steps of
``B`` sequences, ``tau_d(B)``. At ``r`` requests/s per instance the engine spends ``r T_m`` of
each second in mixed steps and fills the rest with decode steps, so a decoding sequence sees
``r k + (1 - r T_m) / tau_d`` steps per second::

    TPOT = 1 / (r k + (1 - r T_m) / tau_d(B)),   B = r (osl - 1) TPOT   (Little's law)
    TTFT = T_m(B) + M^X/D/1 wait (utilisation r T_m, bursts of ``burst``) + half a step
           (joining a running batch)

This is where decode stalls behind prefills (head-of-line blocking): every prompt stretches
``k`` decode steps of everyone else from ``tau_d`` to the mixed step time. The p90 of a
request's TPOT counts the mixed steps in its decode window as a Poisson number.

Disaggregated serving: prefill instances run prompts back to back (``T_pf``; M/D/1 per
instance), the KV crosses the link (M/D/1 on the link, ``min(A, B)`` links in parallel), and
decode instances run pure decode steps. The first token comes from the prefill (pdtrt's router
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

from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import KVLink, kv_transfer_s
from pdtrt.perf.queueing import (
    md1_wait_p90_s,
    md1_wait_s,
    mxd1_wait_p90_s,
    mxd1_wait_s,
    poisson_quantile,
)
from pdtrt.perf.scheduling import running_capacity
from pdtrt.perf.step import decode_work, prefill_chunk_work, prefill_time_s, step_time

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
    # time one prompt occupies the prompt server: its mixed steps (aggregated), its prefill
    # (disaggregated); what closed-loop queueing (pdtrt.perf.closed_loop) is made of
    prompt_service_s: float = 0.0
    join_s: float = 0.0  # half a step spent joining a running batch, part of TTFT


def _mixed_time_s(inst: Instance, f: EfficiencyFactors, isl: int, batch: float,
                  context: float) -> tuple[float, int, float]:
    """(total time of a prompt's mixed steps, number of chunks, longest mixed step)."""
    chunk = max(1, inst.max_num_tokens - int(batch))
    b = int(math.ceil(batch))
    dec = decode_work(b, int(round(b * context)))
    total, done, chunks, longest = 0.0, 0, 0, 0.0
    while done < isl:
        c = min(chunk, isl - done)
        s = step_time(dec + prefill_chunk_work(c, done, last=done + c == isl), inst, f).total_s
        total, done, chunks, longest = total + s, done + c, chunks + 1, max(longest, s)
    return total, chunks, longest


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
        b_obs = max(batch, 1.0)
        tau_d = step_time(decode_work(int(math.ceil(b_obs)), int(round(math.ceil(b_obs) *
                                      context))), inst, f).total_s
        t_m, k, longest = _mixed_time_s(inst, f, isl, batch, context)
        busy_m = r * t_m
        if busy_m >= 1:
            return _unstable(r, "prefill: mixed steps fill the engine", max_decode_batch=max_batch,
                             prefill_service_s=t_m)
        tpot = 1.0 / (r * k + (1.0 - busy_m) / tau_d)
        new_batch = r * n_dec * tpot
        if new_batch > max_batch:
            return _unstable(r, f"decode: batch {new_batch:.0f} > {max_batch} that fit",
                             max_decode_batch=max_batch, prefill_service_s=t_m)
        if abs(new_batch - batch) < 1e-3:
            batch = new_batch
            break
        batch = new_batch
    share_mixed = (r * k) * tpot  # share of steps that carry a prefill chunk
    mixed_step = t_m / k
    m90 = poisson_quantile(share_mixed * n_dec) if n_dec else 0.0
    tpot_p90 = tau_d + min(m90 / n_dec, 1.0) * (mixed_step - tau_d) if n_dec else tpot
    residual = min(batch, 1.0) * tpot / 2
    wait = mxd1_wait_s(busy_m, t_m, burst)
    wait_p90 = mxd1_wait_p90_s(busy_m, t_m, burst)
    decode_util = min(1.0, batch) * (1.0 - busy_m)
    bottleneck = "prefill (mixed steps)" if busy_m >= decode_util else "decode steps"
    return OperatingPoint(
        rate_per_s=r, ttft_s=f.request_overhead_s + t_m + wait + residual,
        ttft_p90_s=f.request_overhead_s + t_m + wait_p90 + 2 * residual,
        tpot_s=tpot, tpot_p90_s=max(tpot_p90, tpot), itl_p90_s=longest if share_mixed > 0.1
        else tau_d, decode_batch=batch, prefill_util=busy_m, decode_util=decode_util,
        link_util=0.0, prefill_service_s=prefill_time_s(inst, f, isl), decode_step_s=tau_d,
        kv_transfer_s=0.0, max_decode_batch=max_batch, stable=True, bottleneck=bottleneck,
        osl_minus_one=n_dec, prompt_service_s=t_m, join_s=residual)


def disaggregated_point(prefill: Instance, decode: Instance, link: KVLink,
                        f_prefill: EfficiencyFactors, f_decode: EfficiencyFactors, *, isl: int,
                        osl: int, rate_per_s: float, prefill_instances: int,
                        decode_instances: int, burst: float = 1.0) -> OperatingPoint:
    """Operating point of ``prefill_instances`` + ``decode_instances`` at ``rate_per_s`` in all."""
    r, n_dec = rate_per_s, max(osl - 1, 0)
    t_pf = prefill_time_s(prefill, f_prefill, isl)
    rho_p = r / prefill_instances * t_pf
    kv_bytes = prefill.model.kv_bytes_per_token(prefill.kv_dtype)
    t_kv = kv_transfer_s(link, isl, kv_bytes)
    links = min(prefill_instances, decode_instances)
    rho_l = r * t_kv / links
    max_batch = running_capacity(decode, isl, osl).seqs
    if max_batch < 1:
        return _unstable(r, "memory: not one sequence fits on decode", max_decode_batch=0)
    if rho_p >= 1:
        return _unstable(r, f"prefill: utilisation {rho_p:.2f}", prefill_service_s=t_pf,
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
    utils = {"prefill": rho_p, "decode": min(1.0, batch / max_batch), "KV link": rho_l}
    return OperatingPoint(
        rate_per_s=r, ttft_s=f_prefill.request_overhead_s + t_pf + mxd1_wait_s(rho_p, t_pf, burst),
        ttft_p90_s=f_prefill.request_overhead_s + t_pf + mxd1_wait_p90_s(rho_p, t_pf, burst),
        tpot_s=tpot,
        tpot_p90_s=tau_d + (t_kv + md1_wait_p90_s(rho_l, t_kv) + tau_d) / max(n_dec, 1),
        itl_p90_s=first_itl if n_dec and 1 / n_dec > 0.1 else tau_d,
        decode_batch=batch, prefill_util=rho_p, decode_util=utils["decode"], link_util=rho_l,
        prefill_service_s=t_pf, decode_step_s=tau_d, kv_transfer_s=t_kv,
        max_decode_batch=max_batch, stable=True, bottleneck=max(utils, key=utils.__getitem__),
        osl_minus_one=n_dec, prompt_service_s=t_pf)
