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


def counter(name: str, description: str, kind: str = "COUNTER") -> Any:
    """A Prometheus metric family on Triton's metrics endpoint (None if unsupported)."""
    try:
        family = pb_utils.MetricFamily(name=name, description=description,
                                       kind=getattr(pb_utils.MetricFamily, kind))
        return family
    except Exception:  # older backends have no custom metrics
        return None
