"""The one seam between pdtrt's Triton models and Triton's Python backend (``pb_utils``).

Triton's Python-backend stub is not safe for concurrent calls from several threads: responses
sent by a scheduler thread while ``execute()`` reads requests segfault the stub (at 32 streams),
and metric updates from KV-pull threads crash the backend's metric handling (SIGSEGV).
pdtrt's models run many threads -- the router's event loop and stream threads, the engine's
scheduler and KV-pull threads -- so :class:`BackendTriton` owns *every* call into
``triton_python_backend_utils`` and takes one process-wide lock inside each of its methods;
model code never touches ``pb_utils`` or the lock. The one call it makes without the lock, on
purpose, is the blocking ``next()`` on a BLS response iterator (:meth:`BackendTriton.bls_next`
says why).

What crosses the seam is plain data: a request comes in once as an :class:`Incoming` (id,
parameters, copies of its input arrays), responses go out as ``{name: array}`` mappings, a BLS
call's responses come back as mappings, metrics are declared by
:class:`~pdtrt.runtime.metrics.MetricSpec`. Models get
the seam injected (the generated ``model.py`` shims build a :class:`BackendTriton` from the
stub's ``pb_utils``); unit tests pass a fake with the same methods (:class:`Triton`). This module
is not a model and holds no request state; parsing what a request *means* is
:mod:`pdtrt.runtime.request_parsing`.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pdtrt.errors import InvalidRequestError, PhaseError

if TYPE_CHECKING:  # the stubs that keep no metrics never load them
    from pdtrt.runtime.metrics import MetricSpec

__all__ = ["BackendTriton", "Incoming", "Triton", "count_outputs", "log_prob_outputs",
           "model_params",
           "token_outputs"]


@dataclass(frozen=True, kw_only=True)
class Incoming:
    """One request as a model reads it, once, at the edge: its id, its request parameters, and
    copies of the input arrays it carries (absent optional inputs are missing). ``handle`` and
    ``sender`` are the backend's request and response-sender objects, opaque to model code."""

    request_id: str
    parameters: Mapping[str, Any]
    inputs: Mapping[str, np.ndarray]
    # the outputs the caller asked for; empty: it named none, so it gets every output
    requested_outputs: tuple[str, ...] = ()
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
        first = value.reshape(-1)[0]
        return first.item() if isinstance(first, np.generic) else first  # bytes of a STRING


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
                 parameters: Mapping[str, str], outputs: Sequence[str],
                 skip_if: Callable[[], str | None] | None = None) -> Any: ...
    def bls_next(self, responses: Any, outputs: Sequence[str]
                 ) -> dict[str, np.ndarray] | None: ...
    # custom metrics
    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> Any | None: ...
    def metric_family(self, spec: MetricSpec, label_sets: Sequence[Mapping[str, str]]
                ) -> list[Any] | None: ...
    def increment(self, metric: Any, value: float) -> None: ...
    def set_gauge(self, metric: Any, value: float) -> None: ...
    # the model's end: the server stopping (SIGTERM), then finalize
    def on_server_stop(self, callback: Callable[[], None]) -> None: ...
    def watch_parent(self) -> None: ...
    def release(self) -> None: ...
    # fault injection: this process dies
    def kill_process(self) -> None: ...


# One lock per process: the stub is one per process, whichever object calls into it. A plain
# Lock, not an RLock: no method below calls another or any model code while holding it.
_LOCK = threading.Lock()

# How long a BLS stream read to its end is kept when no stub round trip has passed meanwhile
# (_EndedStreams says why). The stub forgets a stream within one pass of its stub-to-parent
# queue (a message takes microseconds to a millisecond); the bound only matters for a model
# that makes BLS calls but never asks is_cancelled (a router with no clients, probing).
ENDED_STREAM_HOLD_S = 30.0


class _EndedStreams:
    """BLS response iterators read to their end, kept alive until the stub has forgotten them.

    Why (Triton 2.51, python_backend r24.10): the stub keeps each decoupled BLS call's
    ``ResponseIterator`` in ``Stub::response_iterator_map_`` as well as in the Python object.
    When ``next()`` returns the final response, ``ResponseIterator::Clear`` queues a cleanup
    message (``src/pb_response_iterator.cc``), and the stub's stub-to-parent thread later
    erases the map's entry -- without the GIL (``Stub::SendCleanupId``, ``src/pb_stub.cc``).
    If the Python object is gone by then, that erase destroys the iterator on that thread, and
    with it every response it kept and their output tensors, each of which holds a numpy array
    the stub made (``PbTensor``'s shared-memory constructor, ``src/pb_tensor.cc``): Python
    objects freed without the GIL, a corrupted heap, then a segfault in libpython's allocator
    (in the router's stub under load; docs/design/serve.md, "Triton 2.51 facts", has the gdb
    evidence and ``tests/serve/test_bls_stream_lifetime.py`` the reproduction). The later the stub's
    queue gets to the cleanup -- behind other cleanups and ``is_cancelled`` round trips -- the
    likelier.

    So the seam keeps the iterator until it knows the erase has happened: ``is_cancelled`` is a
    round trip through the same FIFO queue and thread (``PbCancel::IsCancelled`` ->
    ``Stub::SendIsCancelled``), so once one that was asked after a stream ended has been
    answered, that stream's cleanup ran before it and the Python object holds the last
    reference: dropping it frees everything here, with the GIL. A model that never asks
    (no client requests) drops them after :data:`ENDED_STREAM_HOLD_S` instead.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._kept: deque[tuple[float, Any]] = deque()  # (when it ended, the iterator)

    def add(self, responses: Any) -> None:
        """``responses`` has ended (its final response was read); keep it. Call under _LOCK."""
        now = self._clock()
        self._kept.append((now, responses))
        stale = []
        while self._kept and now - self._kept[0][0] > ENDED_STREAM_HOLD_S:
            stale.append(self._kept.popleft())
        stale.clear()  # freed here, with the GIL

    def before_round_trip(self) -> deque[tuple[float, Any]]:
        """The streams that a round trip started now will have seen cleaned up (call under
        _LOCK, then :meth:`after_round_trip` with them)."""
        kept, self._kept = self._kept, deque()
        return kept

    def after_round_trip(self, kept: deque[tuple[float, Any]], *, answered: bool) -> None:
        """``answered``: the round trip went through the stub's queue (a cancelled request's
        answer may come from the stub's cache without one: keep them). Call under _LOCK."""
        if not answered:
            kept.extend(self._kept)
            self._kept = kept
        else:
            kept.clear()  # the last references: each iterator is freed here, with the GIL

    def clear(self) -> None:
        self._kept.clear()


class BackendTriton:
    """:class:`Triton` over the Python backend's ``triton_python_backend_utils`` module."""

    def __init__(self, pb_utils: ModuleType, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pb = pb_utils
        self._final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        # Every pb_utils metric object lives here, and only here (the models hold keys into
        # _metrics), so release() can delete them all while the stub is alive. A Metric must
        # not outlive its MetricFamily.
        self._families: list[Any] = []
        self._metrics: list[Any] = []
        self._released = False  # release() ran: metric updates are no-ops
        self._ended = _EndedStreams(clock)  # BLS iterators read to their end, not forgotten yet

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
        # The request's tensors listed once, not once per name: pb_utils'
        # get_input_tensor_by_name lists them all on each call (python_backend r24.10
        # src/resources/triton_python_backend_utils.py), and the router asks for 27 names.
        given = {t.name(): t for t in request.inputs()}
        inputs = {name: np.array(given[name].as_numpy()) for name in names if name in given}
        return Incoming(request_id=request.request_id(),
                        parameters=_json_object(request.parameters()), inputs=inputs,
                        requested_outputs=tuple(request.requested_output_names()),
                        handle=request,
                        sender=request.get_response_sender() if decoupled else None)

    def is_cancelled(self, request: Incoming) -> bool:
        """Whether the client cancelled ``request``: a round trip to the server (while the
        request is not known to be cancelled). Also the point where ended BLS streams are let
        go (:class:`_EndedStreams` says why)."""
        with _LOCK:
            ended = self._ended.before_round_trip()
            cancelled = bool(request.handle.is_cancelled())
            self._ended.after_round_trip(ended, answered=not cancelled)
            return cancelled

    # -- responses out -----------------------------------------------------------------------
    def _tensors(self, outputs: Mapping[str, np.ndarray]) -> list[Any]:
        return [self._pb.Tensor(name, value) for name, value in outputs.items()]

    def send(self, request: Incoming, outputs: Mapping[str, np.ndarray], *,
             final: bool = False) -> None:
        """One response with ``outputs`` (possibly none); ``final`` ends the request.

        Only the outputs the request asked for are made into tensors (all, when it named
        none). Why: the stub drops the others itself, inside ``ResponseSender::Send`` with the
        GIL released (python_backend r24.10 ``src/response_sender.cc``: ``gil_scoped_release``,
        then ``InferResponse::PruneOutputTensors``), and a dropped tensor frees the numpy array
        it holds (``PbTensor::numpy_array_``, ``src/pb_tensor.h``) without the GIL: a corrupted
        heap, then a segfault in libpython's allocator -- in the decode stub, for one, when its
        caller (the router) asks for fewer outputs than the engine model sends.
        """
        if wanted := request.requested_outputs:
            outputs = {name: value for name, value in outputs.items() if name in wanted}
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
                 parameters: Mapping[str, str], outputs: Sequence[str],
                 skip_if: Callable[[], str | None] | None = None) -> Any:
        """Send a decoupled request to ``model``; returns its response iterator (opaque).

        ``exec`` runs WITHOUT the lock (only building the request takes it): Triton's
        ``exec(decoupled=True)`` returns only once the callee has sent its *first* response
        (python_backend r24.10 ``src/python_be.cc`` ``ExecuteBLSRequest`` waits on the
        request's future, which ``src/infer_payload.cc`` ``SetValue`` fulfils with the first
        response) -- a whole prefill, or never, for a request lost in a callee whose stub died.
        Held across it, the lock would stop every other stream, response and metric of the
        model meanwhile, and for good in the second case: the router would freeze (docs/soak.md,
        "Found by these runs"). The
        stub runs ``exec`` on several threads at once itself (``async_exec``: the event loop's
        executor, ``src/pb_stub.cc`` r24.10). ``skip_if`` is asked just before: a message
        instead of None raises :class:`PhaseError` with it, and nothing is sent (requests for a
        model known to be dead fail at once instead of each waiting on its stub).
        """
        with _LOCK:
            if skip_if is not None and (why := skip_if()) is not None:
                raise PhaseError(why)
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
            with _LOCK:  # the stub may still hold it: not ours to free yet (_EndedStreams)
                self._ended.add(responses)
            return None
        with _LOCK:
            if response.has_error():
                raise PhaseError(response.error().message())
            given = {t.name(): t for t in response.output_tensors()}  # once (see _read)
            got = {name: np.array(given[name].as_numpy()) for name in outputs if name in given}
            del response  # freed here, under the lock, not on whichever thread drops it
        return got

    # -- metrics -----------------------------------------------------------------------------
    def metric(self, spec: MetricSpec, labels: Mapping[str, str]) -> Any | None:
        """A metric of a new family, or None when this backend has no custom metrics."""
        made = self.metric_family(spec, [labels])
        return None if made is None else made[0]

    def metric_family(self, spec: MetricSpec, label_sets: Sequence[Mapping[str, str]]
                      ) -> list[Any] | None:
        """One metric per label set, all of one new family (or None: no custom metrics)."""
        with _LOCK:
            try:
                family = self._pb.MetricFamily(name=spec.name, description=spec.description,
                                               kind=getattr(self._pb.MetricFamily, spec.kind))
            except Exception:  # older backends have no custom metrics
                return None
            self._families.append(family)
            keys = []
            for labels in label_sets:  # the models get keys; the seam keeps the objects
                self._metrics.append(family.Metric(labels=dict(labels)))
                keys.append(len(self._metrics) - 1)
            return keys

    # Each update is a message through the stub's shared memory, like any other call.
    def increment(self, metric: Any, value: float) -> None:
        with _LOCK:
            if not self._released:
                self._metrics[metric].increment(value)

    def set_gauge(self, metric: Any, value: float) -> None:
        with _LOCK:
            if not self._released:
                self._metrics[metric].set(value)

    # -- the model's end ---------------------------------------------------------------------
    def on_server_stop(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (once, on a thread of its own) when the server is told to stop --
        before Triton stops scheduling ensemble steps for good (:mod:`pdtrt.runtime.shutdown`
        says why a model must end its requests then)."""
        from pdtrt.runtime.shutdown import ShutdownWatch

        ShutdownWatch(callback).install()
        self.watch_parent()  # and when the server dies instead, this stub is killed

    def watch_parent(self) -> None:
        """Have this stub killed when its server dies, even if the stub's own exit then hangs
        (:class:`~pdtrt.runtime.shutdown.ParentWatch`). Once per stub."""
        from pdtrt.runtime.shutdown import ParentWatch

        ParentWatch().start()

    def kill_process(self) -> None:
        """SIGKILL this stub between two calls into it, never inside one (fault injection's
        dying process). Killed inside ``send()``, a stub leaves the response's shared-memory
        mutex owner-dead and Triton 2.51 aborts, taking every stream with it (docs/design/
        serve.md, "The owner-dead mutex"): a real crash may, but a test of the router's retry
        must not hinge on that chance."""
        with _LOCK:
            os.kill(os.getpid(), signal.SIGKILL)

    def release(self) -> None:
        """Delete this model's metrics and metric families now; later metric updates are
        no-ops. Call it last in ``finalize()``.

        Why: a ``Metric`` or ``MetricFamily`` deletes itself in the server by a message through
        the stub's shared memory, from its destructor, and frees its own piece of that memory.
        Left to the garbage collector -- the model object sits in reference cycles (bound
        methods held by its own threads) -- those destructors run when the stub tears down after
        ``finalize()``, its shared memory already gone: a SIGSEGV in every stub with metrics at
        every server stop -- in ``Metric::SaveToSharedMemory`` for a family still alive, in
        ``Metric::~Metric`` under ``Py_FinalizeEx`` for a metric the model still holds
        (docs/design/serve.md, "Strict input, clean shutdown"). So both go here, families after
        their metrics. Garbage made by the model (finished requests' senders, BLS iterators) is
        collected here too, while the stub can still take its messages.
        """
        gc.collect()
        with _LOCK:
            # the stub forgot every BLS stream before calling finalize() (its map is cleared
            # on the finalize request, src/pb_stub.cc r24.10), so these are ours to free
            self._ended.clear()
            self._released = True
            metrics, self._metrics = self._metrics, []
            del metrics  # each metric deletes itself in the server, then frees its memory
            families, self._families = self._families, []
            del families


def _json_object(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def model_params(args: dict[str, Any]) -> dict[str, str]:
    """The ``parameters`` of this model's config.pbtxt as plain strings."""
    config = json.loads(args["model_config"])
    return {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}


def token_outputs(tokens: Sequence[int]) -> dict[str, np.ndarray]:
    """``output_ids`` ``[1, 1, n]`` and ``sequence_length`` ``[1, 1]`` of one response."""
    return {"output_ids": np.array(tokens, dtype=np.int32).reshape(1, 1, -1),
            "sequence_length": np.array([[len(tokens)]], dtype=np.int32)}


def count_outputs(prompt_tokens: int | None, response_tokens: int | None
                  ) -> dict[str, np.ndarray]:
    """NVIDIA's ``num_input_tokens`` / ``num_output_tokens`` ``[1, 1]`` of one response, each
    only when asked (None: not asked; :data:`~pdtrt.engine_io.TOKEN_COUNT_TENSORS`)."""
    out = {}
    if prompt_tokens is not None:
        out["num_input_tokens"] = np.array([[prompt_tokens]], dtype=np.int32)
    if response_tokens is not None:
        out["num_output_tokens"] = np.array([[response_tokens]], dtype=np.int32)
    return out


def log_prob_outputs(logprobs: Sequence[float], cumulative: float) -> dict[str, np.ndarray]:
    """``output_log_probs`` ``[1, 1, n]`` (the response's tokens) and ``cum_log_probs``
    ``[1, 1]`` (every token so far) of one response."""
    return {"output_log_probs": np.array(logprobs, dtype=np.float32).reshape(1, 1, -1),
            "cum_log_probs": np.array([[cumulative]], dtype=np.float32)}
