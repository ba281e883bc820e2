"""A fake of pdtrt's Triton seam (:class:`pdtrt.runtime.triton_io.Triton`): no server, no pb_utils.

In the spirit of httpx's ``MockTransport``: the model code runs unchanged against it. A test
builds :class:`FakeRequest` objects (id, input arrays, parameters; ``cancel()`` is the client
cancelling), scripts what the phase models answer to BLS calls (``phases``: a function from a
:class:`PhaseCall` to an iterable of responses -- an outputs mapping, a :class:`Fail` for an
error response, or an exception to raise in the caller), and reads back every response each
request got (:attr:`FakeRequest.responses`), every phase call (:attr:`FakeTriton.calls`) and
every metric (:attr:`FakeTriton.metrics`, by Prometheus name; a labelled one as
``name{label=value,...}``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdtrt.engine_io import REQUEST_TYPE_PARAMETER, RequestType
from pdtrt.errors import PhaseError
from pdtrt.runtime.metrics import MetricSpec
from pdtrt.runtime.triton_io import Incoming


@dataclass(frozen=True)
class Sent:
    """One response a model sent (or returned)."""

    outputs: Mapping[str, np.ndarray]
    error: str | None = None
    final: bool = False

    @property
    def tokens(self) -> list[int]:
        ids = self.outputs.get("output_ids")
        return [] if ids is None else [int(t) for t in ids.reshape(-1)]


class FakeRequest:
    def __init__(self, request_id: str = "", inputs: Mapping[str, Any] | None = None,
                 parameters: Mapping[str, Any] | None = None,
                 requested_outputs: Sequence[str] = ()) -> None:
        self.request_id = request_id
        self.requested_outputs = tuple(requested_outputs)
        self.inputs = {k: np.asarray(v) for k, v in (inputs or {}).items()}
        self.parameters = dict(parameters or {})
        self.responses: list[Sent] = []
        self.late: list[Sent] = []  # responses sent after the final one (always a bug)
        self.cancelled = False
        self._ended = threading.Event()
        self._lock = threading.Lock()

    def cancel(self) -> None:
        self.cancelled = True

    def record(self, sent: Sent) -> None:
        with self._lock:
            (self.late if self._ended.is_set() else self.responses).append(sent)
            if sent.final:
                self._ended.set()

    def wait_final(self, timeout_s: float = 10.0) -> list[Sent]:
        assert self._ended.wait(timeout_s), f"no final response: {self.responses}"
        return self.responses

    @property
    def num_finals(self) -> int:
        return sum(r.final for r in self.responses + self.late)

    @property
    def tokens(self) -> list[int]:
        """Every token of every response, in order."""
        return [t for r in self.responses for t in r.tokens]

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.responses if r.error is not None]


@dataclass(frozen=True)
class Fail:
    """A scripted error response of a phase model."""

    message: str


@dataclass(frozen=True)
class PhaseCall:
    """One BLS request a model made."""

    model: str
    inputs: Mapping[str, np.ndarray]
    request_id: str
    parameters: Mapping[str, str]
    outputs: tuple[str, ...]

    @property
    def request_type(self) -> RequestType:
        return RequestType(self.parameters.get(REQUEST_TYPE_PARAMETER,
                                               RequestType.CONTEXT_AND_GENERATION))

    @property
    def is_stop(self) -> bool:
        stop = self.inputs.get("stop")
        return stop is not None and bool(stop.reshape(-1)[0])


Phases = Callable[[PhaseCall], Iterable[Any]]


class FakeTriton:
    def __init__(self, phases: Phases | None = None) -> None:
        self.phases: Phases = phases or (lambda call: ())
        self.calls: list[PhaseCall] = []
        self.metrics: dict[str, float] = {}
        self.released = False  # the model's finalize() released the seam
        self.parent_watched = False  # the model asked to be killed with its server
        self.kills = 0  # fault injection's kill_process() calls (the process lives on here)
        self._on_stop: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def calls_to(self, model: str, *, stop: bool = False) -> list[PhaseCall]:
        return [c for c in self.calls if c.model == model and c.is_stop == stop]

    # -- requests in -------------------------------------------------------------------------
    def receive(self, requests: Sequence[FakeRequest], names: Iterable[str], *,
                decoupled: bool) -> list[Incoming]:
        names = set(names)
        return [Incoming(request_id=r.request_id, parameters=dict(r.parameters),
                         inputs={k: v for k, v in r.inputs.items() if k in names},
                         requested_outputs=r.requested_outputs,
                         handle=r, sender=r if decoupled else None) for r in requests]

    def is_cancelled(self, request: Incoming) -> bool:
        return request.handle.cancelled

    # -- responses out -----------------------------------------------------------------------
    def send(self, request: Incoming, outputs: Mapping[str, np.ndarray], *,
             final: bool = False) -> None:
        assert all(isinstance(v, np.ndarray) for v in outputs.values()), outputs
        request.sender.record(Sent(dict(outputs), final=final))

    def send_error(self, request: Incoming, message: str, *, final: bool = True) -> None:
        request.sender.record(Sent({}, error=message, final=final))

    def close(self, request: Incoming) -> None:
        request.sender.record(Sent({}, final=True))

    def response(self, outputs: Mapping[str, np.ndarray]) -> Sent:
        return Sent(dict(outputs), final=True)

    def error_response(self, message: str) -> Sent:
        return Sent({}, error=message, final=True)

    # -- BLS ---------------------------------------------------------------------------------
    def bls_exec(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                 parameters: Mapping[str, str], outputs: Sequence[str],
                 skip_if: Callable[[], str | None] | None = None) -> Iterator[Any]:
        if skip_if is not None and (why := skip_if()) is not None:
            raise PhaseError(why)
        call = PhaseCall(model, dict(inputs), request_id, dict(parameters), tuple(outputs))
        with self._lock:
            self.calls.append(call)
        return iter(self.phases(call))

    def bls_next(self, responses: Iterator[Any], outputs: Sequence[str]
                 ) -> dict[str, np.ndarray] | None:
        item = next(responses, None)
        if item is None:
            return None
        if isinstance(item, Fail):
            raise PhaseError(item.message)
        if isinstance(item, BaseException):
            raise item
        return {k: np.asarray(v) for k, v in item.items() if k in outputs}  # only those asked

    # -- metrics -----------------------------------------------------------------------------
    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> str:
        self.metrics[spec.name] = 0.0
        return spec.name

    def metric_family(self, spec: MetricSpec, label_sets: Sequence[Mapping[str, str]]
                      ) -> list[str]:
        """Labelled metrics are recorded as ``name{label=value,...}`` (labels other than
        ``model``, sorted)."""
        names = [spec.name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())
                                            if k != "model") + "}" for labels in label_sets]
        for name in names:
            self.metrics[name] = 0.0
        return names

    def increment(self, metric: str, value: float) -> None:
        with self._lock:
            self.metrics[metric] += value

    def set_gauge(self, metric: str, value: float) -> None:
        self.metrics[metric] = value

    def on_server_stop(self, callback: Callable[[], None]) -> None:
        self._on_stop.append(callback)

    def watch_parent(self) -> None:
        self.parent_watched = True

    def stop_server(self) -> None:
        """What SIGTERM to the server does in a stub: the models' callbacks run."""
        for callback in self._on_stop:
            callback()

    def release(self) -> None:
        self.released = True

    def kill_process(self) -> None:
        self.kills += 1


def tokens_out(*ids: int, **extra: Any) -> dict[str, np.ndarray]:
    """A phase model's data response with ``ids`` (and ``extra`` outputs)."""
    return {"output_ids": np.array(ids, dtype=np.int32).reshape(1, 1, -1),
            "sequence_length": np.array([[len(ids)]], dtype=np.int32),
            **{k: np.asarray(v) for k, v in extra.items()}}


def model_args(name: str, params: Mapping[str, str], *, instance: int = 0) -> dict[str, str]:
    """The ``args`` Triton passes to ``initialize``: the config's string parameters and the
    instance's name (``<model>_<group>_<ordinal>``)."""
    config = {"parameters": {k: {"string_value": v} for k, v in params.items()}}
    return {"model_name": name, "model_instance_name": f"{name}_0_{instance}",
            "model_config": json.dumps(config)}


def wait_until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """In a scripted phase (a reader thread): wait until the router has done ``check``."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the router never got there"
        time.sleep(0.001)
