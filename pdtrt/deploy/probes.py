"""Liveness, readiness and startup probes of every pdtrt pod.

**Readiness** is the one that routes traffic, so it must be honest: a pod is ready when it can
serve a request. Triton's ``/v2/health/ready`` only says that every loaded model loaded -- a
front whose pools are down, or a pool whose engine process died, still answers 200 there. So
the probes ask for the ``health`` model instead (:data:`pdtrt.engine_io.READINESS_PATH`):
``pdtrt serve``'s supervisor, which runs in every reference pod, keeps it loaded only while
each phase has an endpoint that answers its health probes (docs/serve.md). Pods
started by a target's own launch script load it with the rest of the repository, where it
means what ``/v2/health/ready`` means.

**Liveness** asks only whether the server process answers (``/v2/health/live``): restarting a
front because a pool is away would not bring the pool back. **Startup** gives a pod its whole
start -- generating the repository, loading engines (minutes for large TensorRT-LLM engines on
a network volume) -- before liveness may kill it.
"""

from __future__ import annotations

from typing import Any

from pdtrt.engine_io import READINESS_PATH

__all__ = ["LIVENESS_PATH", "PROBE_PORT", "READINESS_PATH", "probes"]

LIVENESS_PATH = "/v2/health/live"
PROBE_PORT = "http"  # the container port's name
STARTUP_PERIOD_S = 10


def _http(path: str, *, period_s: int, failures: int, timeout_s: int = 5) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PROBE_PORT}, "periodSeconds": period_s,
            "timeoutSeconds": timeout_s, "failureThreshold": failures}


def probes(*, startup_budget_s: int) -> dict[str, dict[str, Any]]:
    """The three probes of a container, keyed by their field names; the startup probe allows
    ``startup_budget_s`` seconds (rounded up to a whole probe period)."""
    return {
        "startupProbe": _http(READINESS_PATH, period_s=STARTUP_PERIOD_S,
                              failures=-(-startup_budget_s // STARTUP_PERIOD_S)),
        "readinessProbe": _http(READINESS_PATH, period_s=5, failures=3),
        "livenessProbe": _http(LIVENESS_PATH, period_s=10, failures=6),
    }
