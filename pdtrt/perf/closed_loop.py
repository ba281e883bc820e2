"""Closed-loop serving: ``C`` clients, each sending its next request when the last one ends.

The engine schedules new prompts ahead of running decodes (:mod:`pdtrt.perf.scheduling`), so
the clients form a finite-population queue at the prompt server: a client "thinks" while its
request decodes, ``Z = (osl - 1) TPOT`` (plus joining the batch), then queues for its
prompt's service ``S`` -- the engine time one prompt accounts for, its share of the prompt
steps it rides in (:mod:`pdtrt.perf.batching`). Every request has the same lengths, so
service and think times are deterministic and the queue follows its asymptotic bounds, with
``b`` prompts arriving together (``burst``)::

    R_min = a prompt's own steps with its burst-mates (one shared step when they fit in one,
            else step-fulls one after another; S (1 + (b - 1) / 2) for chunked prompts)
    X     = min(C / (Z + R_min), 1 / S)           (clients' pace, or the prompt server's)
    R     = max(R_min, C / X - Z)                 (TTFT part: the queue when saturated)

(Mean-value analysis, exact for exponential service, smooths the knee into a long prompt
queue and pure decode steps; the measured runs show the deterministic picture: a saturated
engine runs only prompt steps, and the queue goes into TPOT.) ``S`` and ``TPOT`` grow with the
request rate (prefills interrupt decodes, batches grow), so the rate solves
``X(C, S(r), Z(r)) = r`` by bisection. Unlike an open-loop queue this never diverges: TTFT
stays below ``C`` services and excess load shows up where TensorRT-LLM puts it, in TPOT
(every prompt stalls every decode).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pdtrt.perf.point import OperatingPoint

__all__ = ["ClosedLoop", "prompt_queue", "solve_closed_loop"]

_BISECTION_STEPS = 40
_REL_TOL = 1e-4


def prompt_queue(clients: float, service_s: float, think_s: float, burst: float = 1.0, *,
                 min_response_s: float | None = None) -> tuple[float, float, float]:
    """(prompt response time s, throughput /s, prompts queued ahead beyond the burst) of
    ``clients`` at one FCFS prompt server with deterministic times (see module doc).
    ``min_response_s``: a prompt's own time with its burst-mates when the server batches
    them (:mod:`pdtrt.perf.batching`); default: the burst served one after another."""
    b = min(burst, max(clients, 1.0))
    r_min = min_response_s if min_response_s is not None else service_s * (1.0 + (b - 1.0) / 2.0)
    x = min(clients / (think_s + r_min), 1.0 / service_s)
    r = max(r_min, clients / x - think_s)
    return r, x, max((r - r_min) / service_s, 0.0)


@dataclass(frozen=True, kw_only=True)
class ClosedLoop:
    """The closed-loop solution: request rate, prompt response time and its p90, the point."""

    rate_per_s: float
    prompt_response_s: float
    prompt_response_p90_s: float
    point: OperatingPoint


def solve_closed_loop(point_at: Callable[[float], OperatingPoint], *, clients: float,
                      instances: int, burst: float) -> ClosedLoop:
    """Solve ``X(C, S(r), Z(r)) = r`` for the total rate ``r`` over ``instances`` equal prompt
    servers sharing ``clients``; ``point_at(r)`` is the operating point at total rate ``r``."""
    per = clients / instances

    def response(r: float) -> tuple[float, float, float, OperatingPoint]:
        p = point_at(r)
        if not p.stable:
            return math.inf, 0.0, 0.0, p
        # joining the running batch is part of the cycle but not of the prompt queue
        think = p.tpot_s * p.osl_minus_one + p.join_s
        resp, x, q = prompt_queue(per, p.prompt_service_s, think, burst,
                                  min_response_s=p.prompt_latency_s)
        return resp, x * instances, q, p

    p0 = point_at(1e-9)
    if not p0.stable:  # not one sequence fits: nothing runs
        return ClosedLoop(rate_per_s=0.0, prompt_response_s=math.inf,
                          prompt_response_p90_s=math.inf, point=p0)
    # the clients' pace at no load bounds the rate from above
    lo, hi = 0.0, clients / (p0.prompt_latency_s + p0.tpot_s * p0.osl_minus_one + p0.join_s)
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2
        _, x, _, _ = response(mid)
        if x > mid:
            lo = mid
        else:
            hi = mid
        if hi - lo <= _REL_TOL * hi:
            break
    resp, _, q, p = response(lo)
    # p90: the burst-mates at the 90th percentile plus an exponential tail on the queue
    p90 = p.prompt_latency_p90_s + p.prompt_service_s * q * math.log(10.0)
    return ClosedLoop(rate_per_s=lo, prompt_response_s=resp,
                      prompt_response_p90_s=max(p90, resp), point=p)
