"""Small helpers shared by pdtrt's Python-backend models: parameters, inputs, responses.

Only importable inside Triton's Python backend (``triton_python_backend_utils``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

# The stub's C++ side is not safe for concurrent calls from several threads (seen: a segfault
# with 32 streams when the scheduler thread sent responses while execute() read requests).
# Every call into pb_utils from a thread other than the one execute() runs on takes this lock.
PB_LOCK = threading.RLock()


class RequestError(Exception):
    """Bad input of one request: becomes that request's error response, nothing else."""


def model_params(args: dict[str, Any]) -> dict[str, str]:
    """The ``parameters`` of this model's config.pbtxt as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def tensor(request: Any, name: str) -> np.ndarray | None:
    t = pb_utils.get_input_tensor_by_name(request, name)
    return None if t is None else t.as_numpy()


def scalar(request: Any, name: str, default: Any = None, *, required: bool = False) -> Any:
    """The first element of an optional scalar input (shape ``[1]`` or ``[1, 1]``)."""
    value = tensor(request, name)
    if value is None or value.size == 0:
        if required:
            raise RequestError(f"input '{name}' is required")
        return default
    return value.reshape(-1)[0].item()


def request_parameters(request: Any) -> dict[str, Any]:
    try:
        return json.loads(request.parameters() or "{}")
    except (ValueError, TypeError):
        return {}


def send_error(sender: Any, message: str) -> None:
    with PB_LOCK:
        sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                    flags=FINAL)


def token_outputs(tokens: list[int] | tuple[int, ...]) -> list[Any]:
    """``output_ids`` ``[1, 1, n]`` and ``sequence_length`` ``[1, 1]`` of one response."""
    ids = np.array(tokens, dtype=np.int32).reshape(1, 1, -1)
    return [pb_utils.Tensor("output_ids", ids),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32))]


class Metrics:
    """Prometheus metrics of one model on Triton's metrics endpoint, keyed by short names.

    ``specs`` maps key -> (metric name, description, "COUNTER" | "GAUGE"). A backend without
    custom metrics makes every call a no-op. The families are kept: a Metric must not outlive
    its MetricFamily.
    """

    def __init__(self, specs: dict[str, tuple[str, str, str]], labels: dict[str, str]) -> None:
        self._families: dict[str, Any] = {}
        self._metrics: dict[str, Any] = {}
        for key, (name, description, kind) in specs.items():
            try:
                family = pb_utils.MetricFamily(name=name, description=description,
                                               kind=getattr(pb_utils.MetricFamily, kind))
            except Exception:  # older backends have no custom metrics
                continue
            self._families[key] = family
            self._metrics[key] = family.Metric(labels=labels)

    # Each update is a message through the stub's shared memory, so it takes PB_LOCK like any
    # other pb_utils call: unlocked updates from the KV-pull threads corrupted that memory and
    # crashed the server (SIGSEGV in the backend's metric handling under concurrent pulls).
    def add(self, key: str, value: float = 1.0) -> None:
        if key in self._metrics:
            with PB_LOCK:
                self._metrics[key].increment(value)

    def set(self, key: str, value: float) -> None:
        if key in self._metrics:
            with PB_LOCK:
                self._metrics[key].set(value)
