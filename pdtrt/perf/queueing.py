"""Closed-form queueing used by the analytical estimate.

- M/D/1 (Poisson arrivals, one server, deterministic service ``S``, utilisation ``rho``):
  mean wait ``W = rho * S / (2 (1 - rho))`` (Pollaczek-Khinchine with zero service variance).
- Its 90th percentile is approximated by an exponential tail with the same mean and the
  probability ``rho`` of waiting at all: ``P(W > t) = rho * exp(-rho t / W)``, so
  ``t90 = (W / rho) ln(10 rho)`` for ``rho > 0.1`` (else 0).
- M^X/D/1 (Poisson arrivals of bursts of ``b`` customers, each served for ``S`` in turn): a
  burst waits like one M/D/1 customer with service ``b S`` at the same utilisation, and a
  customer then waits for the ``(b-1)/2`` burst-mates served before it on average:
  ``W = rho b S / (2 (1 - rho)) + (b - 1) S / 2``; its p90 adds ``0.9 b - 1`` services to the
  burst's p90.
- Poisson quantiles by the normal approximation (continuity-corrected), for counting how many
  prefill iterations interrupt one request's decode.

The simulator (:mod:`pdtrt.sim`) reproduces the M/D/1 mean
(``tests/sim/test_simulator.py::test_single_prefill_server_matches_md1``); the closed forms
are checked in ``tests/perf/test_estimate.py``.
"""

from __future__ import annotations

import math

__all__ = ["md1_wait_p90_s", "md1_wait_s", "mxd1_wait_p90_s", "mxd1_wait_s",
           "poisson_quantile"]


def md1_wait_s(rho: float, service_s: float) -> float:
    """Mean queueing delay of an M/D/1 queue; ``inf`` when ``rho >= 1``."""
    if rho <= 0:
        return 0.0
    if rho >= 1:
        return math.inf
    return rho * service_s / (2.0 * (1.0 - rho))


def md1_wait_p90_s(rho: float, service_s: float) -> float:
    """Approximate 90th-percentile queueing delay of an M/D/1 queue (see module doc)."""
    if rho <= 0.1:
        return 0.0
    mean = md1_wait_s(rho, service_s)
    if math.isinf(mean):
        return math.inf
    return mean / rho * math.log(10.0 * rho)


def mxd1_wait_s(rho: float, service_s: float, burst: float = 1.0) -> float:
    """Mean queueing delay in an M^X/D/1 queue with bursts of ``burst`` (see module doc)."""
    b = max(burst, 1.0)
    return md1_wait_s(rho, b * service_s) + (b - 1.0) * service_s / 2.0


def mxd1_wait_p90_s(rho: float, service_s: float, burst: float = 1.0) -> float:
    """Approximate p90 queueing delay of an M^X/D/1 queue (see module doc)."""
    b = max(burst, 1.0)
    return md1_wait_p90_s(rho, b * service_s) + max(0.9 * b - 1.0, 0.0) * service_s


def poisson_quantile(mean: float, q: float = 0.9) -> float:
    """Approximate ``q`` quantile of a Poisson count with ``mean`` (normal approximation)."""
    if mean <= 0:
        return 0.0
    z = {0.5: 0.0, 0.9: 1.2816, 0.95: 1.6449, 0.99: 2.3263}.get(q)
    if z is None:
        raise ValueError(f"unsupported quantile {q}")
    return max(0.0, mean + z * math.sqrt(mean) - 0.5 * (z > 0))
