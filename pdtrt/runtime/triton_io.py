"""The one seam between pdtrt's Triton models and Triton's Python backend (``pb_utils``).

Triton's Python-backend stub is not safe for concurrent calls from several threads (seen: a
segfault with 32 streams when the scheduler thread sent responses while ``execute()`` read
requests; a SIGSEGV in the backend's metric handling when the KV-pull threads updated metrics).
pdtrt's models run many threads -- the router's event loop and stream threads, the engine's
scheduler and KV-pull threads -- so :class:`BackendTriton` owns *every* call into
``triton_python_backend_utils`` and takes one process-wide lock inside each of its methods;
model code never touches ``pb_utils`` or the lock. The one call it makes without the lock, on
purpose, is the blocking ``next()`` on a BLS response iterator (:meth:`BackendTriton.bls_next`
says why).

What crosses the seam is plain data: a request comes in once as an :class:`Incoming` (id,
parameters, copies of its input arrays), responses go out as ``{name: array}`` mappings, a BLS
call's responses come back as mappings, metrics are declared by :class:`MetricSpec`. Models get
the seam injected (the generated ``model.py`` shims build a :class:`BackendTriton` from the
stub's ``pb_utils``); unit tests pass a fake with the same methods (:class:`Triton`). This module
is not a model and holds no request state; parsing what a request *means* is
:mod:`pdtrt.runtime.requests`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from pdtrt.errors import InvalidRequestError, PhaseError

__all__ = ["BackendTriton", "Incoming", "MetricKind", "MetricSpec", "Metrics", "Triton",
           "model_params", "token_outputs"]


@dataclass(frozen=True, kw_only=True)
class Incoming:
    """One request as a model reads it, once, at the edge: its id, its request parameters, and
    copies of the input arrays it carries (absent optional inputs are missing). ``handle`` and
    ``sender`` are the backend's request and response-sender objects, opaque to model code."""

    request_id: str
    parameters: Mapping[str, Any]
    inputs: Mapping[str, np.ndarray]
    handle: Any = field(default=None, repr=False, compare=False)
    sender: Any = field(default=None, repr=False, compare=False)

    def tensor(self, name: str) -> np.ndarray | None:
        return self.inputs.get(name)

    def scalar(self, name: str, default: Any = None, *, required: bool = False) -> Any:
        """The first element of an optional scalar input (shape ``[1]`` or ``[1, 1]``).

        Raises :class:`InvalidRequestError` when a ``required`` one is absent or empty.
        """
        value = self.inputs.get(name)
        if value is None or value.size == 0:
            if required:
                raise InvalidRequestError(f"input '{name}' is required")
            return default
        return value.reshape(-1)[0].item()


class MetricKind(StrEnum):
    """Kinds of Triton custom metrics (``pb_utils.MetricFamily.COUNTER`` / ``GAUGE``)."""

    COUNTER = "COUNTER"
    GAUGE = "GAUGE"


@dataclass(frozen=True)
class MetricSpec:
    name: str  # Prometheus name on Triton's metrics port
    description: str
    kind: MetricKind


class Triton(Protocol):
    """What pdtrt's models may ask of Triton; :class:`BackendTriton` is the real one."""

    # requests in
    def receive(self, requests: Sequence[Any], names: Iterable[str], *,
                decoupled: bool) -> list[Incoming]: ...
    def is_cancelled(self, request: Incoming) -> bool: ...
    # responses out, decoupled models (through the request's response sender)
    def send(self, request: Incoming, outputs: Mapping[str, np.ndarray], *,
             final: bool = False) -> None: ...
    def send_error(self, request: Incoming, message: str, *, final: bool = True) -> None: ...
    def close(self, request: Incoming) -> None: ...
    # responses out, models whose execute() returns them
    def response(self, outputs: Mapping[str, np.ndarray]) -> Any: ...
    def error_response(self, message: str) -> Any: ...
    # BLS: a decoupled request to another model of this server
    def bls_exec(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                 parameters: Mapping[str, str], outputs: Sequence[str]) -> Any: ...
    def bls_next(self, responses: Any, outputs: Sequence[str]
                 ) -> dict[str, np.ndarray] | None: ...
    # custom metrics
    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> Any | None: ...
    def increment(self, metric: Any, value: float) -> None: ...
    def set_gauge(self, metric: Any, value: float) -> None: ...


# One lock per process: the stub is one per process, whichever object calls into it. A plain
# Lock, not an RLock: no method below calls another or any model code while holding it.
_LOCK = threading.Lock()


class BackendTriton:
    """:class:`Triton` over the Python backend's ``triton_python_backend_utils`` module."""

    def __init__(self, pb_utils: ModuleType) -> None:
        self._pb = pb_utils
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._families: list[Any] = []  # a Metric must not outlive its MetricFamily

    # -- requests in -------------------------------------------------------------------------
    def receive(self, requests: Sequence[Any], names: Iterable[str], *,
                decoupled: bool) -> list[Incoming]:
        """Read each request once: id, parameters, the inputs called ``names`` (copied, so no
        array refers to the stub's shared memory later), and, for a decoupled model, its
        response sender."""
        names = tuple(names)
        with _LOCK:
            return [self._read(r, names, decoupled) for r in requests]

    def _read(self, request: Any, names: tuple[str, ...], decoupled: bool) -> Incoming:
        inputs = {}
        for name in names:
            t = self._pb.get_input_tensor_by_name(request, name)
            if t is not None:
                inputs[name] = np.array(t.as_numpy())
        return Incoming(request_id=request.request_id(),
                        parameters=_json_object(request.parameters()), inputs=inputs,
                        handle=request,
                        sender=request.get_response_sender() if decoupled else None)

    def is_cancelled(self, request: Incoming) -> bool:
        with _LOCK:
            return bool(request.handle.is_cancelled())

    # -- responses out -----------------------------------------------------------------------
    def _tensors(self, outputs: Mapping[str, np.ndarray]) -> list[Any]:
        return [self._pb.Tensor(name, value) for name, value in outputs.items()]

    def send(self, request: Incoming, outputs: Mapping[str, np.ndarray], *,
             final: bool = False) -> None:
        """One response with ``outputs`` (possibly none); ``final`` ends the request."""
        with _LOCK:
            response = self._pb.InferenceResponse(output_tensors=self._tensors(outputs))
            request.sender.send(response, flags=self._final if final else 0)

    def send_error(self, request: Incoming, message: str, *, final: bool = True) -> None:
        with _LOCK:
            response = self._pb.InferenceResponse(error=self._pb.TritonError(message))
            request.sender.send(response, flags=self._final if final else 0)

    def close(self, request: Incoming) -> None:
        """End the request with the final flag alone (an empty final response)."""
        with _LOCK:
            request.sender.send(flags=self._final)

    def response(self, outputs: Mapping[str, np.ndarray]) -> Any:
        with _LOCK:
            return self._pb.InferenceResponse(output_tensors=self._tensors(outputs))

    def error_response(self, message: str) -> Any:
        with _LOCK:
            return self._pb.InferenceResponse(error=self._pb.TritonError(message))

    # -- BLS ---------------------------------------------------------------------------------
    def bls_exec(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                 parameters: Mapping[str, str], outputs: Sequence[str]) -> Any:
        """Send a decoupled request to ``model``; returns its response iterator (opaque)."""
        with _LOCK:
            request = self._pb.InferenceRequest(
                model_name=model, inputs=self._tensors(inputs),
                requested_output_names=list(outputs), request_id=request_id,
                parameters=dict(parameters))
            return request.exec(decoupled=True)

    def bls_next(self, responses: Any, outputs: Sequence[str]) -> dict[str, np.ndarray] | None:
        """Block for the next response of a :meth:`bls_exec` call: its ``outputs`` (those
        present, copied), or None when the stream has ended.

        Raises :class:`PhaseError` with the message of an error response; an error ends the
        stream (Triton 2.51's iterator never yields the final flag after one).

        ``next()`` is called WITHOUT the lock, deliberately and only here: it blocks until the
        callee sends its next response -- for a decode stream, until the next token -- and
        every other thread of the model (other streams, the metrics, the responses to the
        client) needs the lock meanwhile, so holding it would serialise or deadlock the router.
        It does not call into the stub's shared memory: the stub's own thread receives the
        responses and queues them for the iterator. Reading the response takes the lock.
        """
        response = next(responses, None)
        if response is None:
            return None
        with _LOCK:
            if response.has_error():
                raise PhaseError(response.error().message())
            got = {}
            for name in outputs:
                t = self._pb.get_output_tensor_by_name(response, name)
                if t is not None:
                    got[name] = np.array(t.as_numpy())
            del response  # freed here, under the lock, not on whichever thread drops it
        return got

    # -- metrics -----------------------------------------------------------------------------
    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> Any | None:
        """A metric of a new family, or None when this backend has no custom metrics."""
        with _LOCK:
            try:
                family = self._pb.MetricFamily(name=spec.name, description=spec.description,
                                               kind=getattr(self._pb.MetricFamily, spec.kind))
            except Exception:  # older backends have no custom metrics
                return None
            self._families.append(family)
            return family.Metric(labels=dict(labels))

    # Each update is a message through the stub's shared memory, like any other call.
    def increment(self, metric: Any, value: float) -> None:
        with _LOCK:
            metric.increment(value)

    def set_gauge(self, metric: Any, value: float) -> None:
        with _LOCK:
            metric.set(value)


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


class Metrics:
    """Prometheus metrics of one model on Triton's metrics endpoint, keyed by short names.

    A backend without custom metrics makes every call a no-op.
    """

    def __init__(self, triton: Triton, specs: Mapping[str, MetricSpec],
                 labels: Mapping[str, str]) -> None:
        self._triton = triton
        self._metrics = {key: metric for key, spec in specs.items()
                         if (metric := triton.metric(spec, labels)) is not None}

    def add(self, key: str, value: float = 1.0) -> None:
        if key in self._metrics:
            self._triton.increment(self._metrics[key], value)

    def set(self, key: str, value: float) -> None:
        if key in self._metrics:
            self._triton.set_gauge(self._metrics[key], value)


def model_params(args: dict[str, Any]) -> dict[str, str]:
    """The ``parameters`` of this model's config.pbtxt as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def token_outputs(tokens: Sequence[int]) -> dict[str, np.ndarray]:
    """``output_ids`` ``[1, 1, n]`` and ``sequence_length`` ``[1, 1]`` of one response."""
    return {"output_ids": np.array(tokens, dtype=np.int32).reshape(1, 1, -1),
            "sequence_length": np.array([[len(tokens)]], dtype=np.int32)}
