"""pdtrt's engine model for Triton (roles prefill, decode, aggregated) over the reference engine.

Implements the core ``tensorrt_llm`` contract (:data:`pdtrt.engine_io.REFERENCE_ENGINE_IO`):
``request_type`` context_only / generation_only / context_and_generation (request parameter),
``context_phase_params`` out of a context-only request and into the generation-only one,
streaming, greedy and seeded sampling, ``end_id``, max tokens, timing outputs, and ``stop``:
like the ``tensorrt_llm`` model, a request with ``stop`` = true stops the in-flight request with
the same request id (and, on the prefill side, frees the KV it still holds). Requests are parsed
and checked against the engine limits -- ``max_beam_width`` from the engine's manifest -- and
TensorRT-LLM's sampling rules before anything is allocated (:mod:`pdtrt.runtime.requests`).
The model is decoupled: ``execute`` hands requests to the in-flight scheduler and returns at
once; generation-only requests first pull their KV over UCX on a worker thread. Each request
ends with exactly one final response (:class:`_Responder`). When the server is told to stop
(SIGTERM reaches the stub) every request in flight ends with "the server is shutting down" and
new ones are refused (:meth:`TritonPythonModel.drain`); ``finalize`` stops the threads and UCX
and releases the seam, so nothing touches the stub while it tears down.
All of Triton goes through the injected seam (:class:`~pdtrt.runtime.triton_io.Triton`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pdtrt.build.manifest import read_manifest
from pdtrt.engine_io import ERROR_OUTPUT, REFERENCE_ENGINE_IO, Param, RequestType, Role
from pdtrt.errors import InvalidRequestError, KVTransferError
from pdtrt.llmapi.reference.transceiver import HeldKV
from pdtrt.runtime.faults import FaultInjection
from pdtrt.runtime.inflight import InflightRequests, StopHandle
from pdtrt.runtime.kv_transfer import UcxKVNode
from pdtrt.runtime.llm_metrics import METRICS as LLM_METRICS
from pdtrt.runtime.phase_params import ContextPhaseParams
from pdtrt.runtime.reference_engine import (
    ReferenceEngine,
    load_reference_engine,
    pack_kv,
    unpack_kv,
)
from pdtrt.runtime.requests import (
    EngineLimits,
    EngineRequest,
    StopRequest,
    parse_engine_request,
)
from pdtrt.runtime.scheduler import Emission, Scheduler, SeqRequest
from pdtrt.runtime.shutdown import SETTLE_S, SHUTTING_DOWN
from pdtrt.runtime.triton_io import (
    Incoming,
    MetricKind,
    Metrics,
    MetricSpec,
    Triton,
    model_params,
    token_outputs,
)

log = logging.getLogger(__name__)

_COUNTER, _GAUGE = MetricKind.COUNTER, MetricKind.GAUGE
# The LLM-API engine model's table (the same names), less its two gauges this model has no
# figure for, and two descriptions that say what this model measures.
_METRICS = {k: v for k, v in LLM_METRICS.items() if k not in ("kv_usage", "queued")} | {
    "queue_s": MetricSpec("pdtrt_engine_queue_seconds_total",
                          "Seconds requests waited before the scheduler took them", _COUNTER),
    "active": MetricSpec("pdtrt_engine_active_sequences",
                         "Sequences the engine holds (waiting or running)", _GAUGE),
}
_PHASE_ROLES = (Role.PREFILL, Role.DECODE)


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """An engine model's ``config.pbtxt`` parameters (:class:`pdtrt.engine_io.Param`)."""

    role: Role
    engine_dir: Path
    tokens_per_block: int
    max_batch_size: int
    max_num_tokens: int
    max_input_len: int
    max_seq_len: int
    ucx_tls: tuple[str, ...]  # UCX transports of the KV transfer (prefill and decode roles)
    kv_transfer_timeout_s: float
    max_beam_width: int = 1  # the engine's, from its manifest (initialize reads it)

    @classmethod
    def from_params(cls, p: dict[str, str]) -> EngineConfig:
        return cls(role=Role(p[Param.ROLE]), engine_dir=Path(p[Param.ENGINE_DIR]),
                   tokens_per_block=int(p[Param.TOKENS_PER_BLOCK]),
                   max_batch_size=int(p[Param.MAX_BATCH_SIZE]),
                   max_num_tokens=int(p[Param.MAX_NUM_TOKENS]),
                   max_input_len=int(p[Param.MAX_INPUT_LEN]),
                   max_seq_len=int(p[Param.MAX_SEQ_LEN]),
                   ucx_tls=tuple(p[Param.UCX_TLS].split(",")),
                   kv_transfer_timeout_s=float(p[Param.KV_TRANSFER_TIMEOUT_S]))


def _max_beam_width(engine_dir: Path) -> int:
    """The ``max_beam_width`` the engine was built with (its manifest's build settings)."""
    settings = read_manifest(engine_dir).build_settings.get("settings", {})
    value = settings.get("max_beam_width", {}) if isinstance(settings, dict) else {}
    return int(value.get("value", 1)) if isinstance(value, dict) else 1


class TritonPythonModel:
    def __init__(self, triton: Triton) -> None:
        self.triton = triton

    def initialize(self, args: dict[str, Any]) -> None:
        config = EngineConfig.from_params(model_params(args))
        config = dataclasses.replace(config, max_beam_width=_max_beam_width(config.engine_dir))
        engine = load_reference_engine(config.engine_dir,
                                       tokens_per_block=config.tokens_per_block)
        ucx = None
        if config.role in _PHASE_ROLES:
            ucx = UcxKVNode(transports=config.ucx_tls, timeout_s=config.kv_transfer_timeout_s,
                            on_change=self._publish_gauges)
            ucx.start()
        self.setup(config, engine, model_name=args["model_name"], ucx=ucx,
                   faults=FaultInjection.from_env(config.role))

    def setup(self, config: EngineConfig, engine: ReferenceEngine, *, model_name: str,
              ucx: UcxKVNode | None = None, faults: FaultInjection | None = None) -> None:
        """Serve ``engine`` (``initialize`` loads it from ``config``; tests pass a small one).
        ``ucx`` moves the KV of the prefill and decode roles; None for the aggregated role."""
        self.role = config.role
        self.engine = engine
        self.ucx = ucx
        self.limits = EngineLimits(role=config.role, max_input_len=config.max_input_len,
                                   max_seq_len=config.max_seq_len,
                                   vocab_size=int(engine.model.config.vocab_size),
                                   layout=engine.layout, serves_phases=ucx is not None,
                                   max_beam_width=min(config.max_beam_width,
                                                      engine.max_beam_width))
        self.metrics = Metrics(self.triton, _METRICS, {"model": model_name})
        self.inflight = InflightRequests()
        self.scheduler = Scheduler(engine, max_batch_size=config.max_batch_size,
                                   max_num_tokens=config.max_num_tokens, faults=faults)
        self.scheduler.start()
        self.pulls = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pdtrt-kv-pull")
        self.draining = False  # the server is stopping: nothing new is admitted
        self._live: set[_Responder] = set()  # requests without their final response yet
        self._live_lock = threading.Lock()
        self.triton.on_server_stop(self.drain)

    def _publish_gauges(self) -> None:
        self.metrics.set("active", self.inflight.num_live)
        if self.ucx is not None:
            self.metrics.set("kv_held", len(self.ucx.stats.held))
            self.metrics.set("kv_expired", self.ucx.stats.expired)
            self.metrics.set("kv_released", self.ucx.stats.released)

    # -- requests ----------------------------------------------------------------------------
    def execute(self, requests: list[Any]) -> None:
        for incoming in self.triton.receive(requests, REFERENCE_ENGINE_IO.input_names,
                                            decoupled=True):
            arrival_ns = time.time_ns()
            try:
                request = parse_engine_request(incoming, self.limits)
                if isinstance(request, StopRequest):
                    self._stop(incoming, request)
                else:
                    self._admit(incoming, request, arrival_ns)
            except (InvalidRequestError, KVTransferError) as exc:
                self.triton.send_error(incoming, exc.message)
            except Exception as exc:  # a bug: still one final response, and the traceback
                log.exception("engine model failure on request %r", incoming.request_id)
                self.triton.send_error(incoming, f"engine model failure: {exc}")
        self._publish_gauges()
        return None

    def _admit(self, incoming: Incoming, request: EngineRequest, arrival_ns: int) -> None:
        handle = self.inflight.register(request.request_id)
        out = _Responder(self, incoming, request, arrival_ns=arrival_ns, handle=handle)
        with self._live_lock:
            if self.draining:
                self.inflight.finished(handle)
                raise InvalidRequestError(SHUTTING_DOWN)
            self._live.add(out)
        seq = SeqRequest(request_id=request.request_id, prompt=list(request.prompt),
                         max_new_tokens=request.max_new_tokens, end_id=request.end_id,
                         sampling=request.sampling, mode=request.mode, emit=out.emit,
                         is_cancelled=out.cancelled)
        if request.context_phase_params is not None:
            self.pulls.submit(self._pull_then_submit, seq, request.context_phase_params, out)
        else:
            self.scheduler.submit(seq)

    def _stop(self, incoming: Incoming, stop: StopRequest) -> None:
        """The ``tensorrt_llm`` stop request: stop ``request_id``'s sequences, free its KV."""
        result = self.inflight.stop(stop.request_id)
        if self.ucx is not None:
            for transfer_id in result.transfers:
                self.ucx.release(transfer_id)
        log.info("stop %s: %d sequence(s), %d held KV", stop.request_id, result.sequences,
                 len(result.transfers))
        self.triton.send(incoming, {}, final=True)

    def _pull_then_submit(self, seq: SeqRequest, params: ContextPhaseParams,
                          out: _Responder) -> None:
        try:
            start = time.perf_counter()
            assert self.ucx is not None
            held = HeldKV.decode(params.opaque_state)
            if held.layout != self.engine.layout:
                raise KVTransferError(f"KV layout of the prefill ({held.layout}) differs from "
                                      f"this engine's ({self.engine.layout})")
            buffer = self.ucx.pull(held.address, held.transfer_id, held.kv_nbytes)
            seq.imported_kv = unpack_kv(buffer, self.engine.layout, params.prompt_len)
            seq.first_tokens = params.first_gen_tokens
            self.metrics.add("kv_seconds", time.perf_counter() - start)
            self.metrics.add("kv_count", 1)
            self.metrics.add("kv_bytes", held.kv_nbytes)
        except Exception as exc:
            out.fail(f"KV transfer failed: {getattr(exc, 'message', exc)}")
            return
        self.scheduler.submit(seq)

    def ended(self, out: _Responder) -> None:
        """``out``'s final response went out."""
        with self._live_lock:
            self._live.discard(out)

    # -- the end -----------------------------------------------------------------------------
    def drain(self) -> None:
        """The server is stopping (SIGTERM, or finalize): every request in flight ends now with
        :data:`SHUTTING_DOWN` (its sequence stops at the next step), new ones are refused."""
        with self._live_lock:
            self.draining = True
            live, self._live = list(self._live), set()
        for out in live:
            out.hold()  # no more tokens; its sequence stops at the next step
        if live:
            time.sleep(SETTLE_S)  # the responses already sent go through their ensemble steps
        for out in live:
            out.fail(SHUTTING_DOWN)
        if live:
            log.info("drained %d request(s) in flight", len(live))
        self._publish_gauges()

    def finalize(self) -> None:
        """Drain, stop the scheduler, the KV pulls and UCX (freeing held KV), then release the
        seam -- in that order, so no thread touches the stub once it tears down."""
        self.drain()
        self.scheduler.stop()
        self.pulls.shutdown(wait=False, cancel_futures=True)
        if self.ucx is not None:
            self.ucx.on_change = None
            self.ucx.stop()
        self.triton.release()


class _Responder:
    """Turns one request's scheduler emissions into Triton responses; exactly one final."""

    def __init__(self, model: TritonPythonModel, incoming: Incoming, request: EngineRequest, *,
                 arrival_ns: int, handle: StopHandle) -> None:
        self.model, self.triton, self.incoming = model, model.triton, incoming
        self.request, self.arrival_ns, self.handle = request, arrival_ns, handle
        # emit() and cancelled() run on the scheduler thread, fail() on a KV-pull or the
        # SIGTERM thread: one at a time.
        self._lock = threading.Lock()
        self.tokens: list[int] = []
        self.done = False  # the final response went out
        self.sent = False  # a response with data went out
        self.held = False  # the server is stopping: only the error goes out

    def fail(self, message: str) -> None:
        """End the request with an error."""
        with self._lock:
            self._fail(message)

    def cancelled(self) -> bool:
        """Stopped, or the client has gone. Once the final response is out Triton is not
        asked: its response factory is gone then, and asking crashed the server (SIGSEGV in
        ``TRITONBACKEND_ResponseFactoryIsCancelled``) -- hence the lock the final takes too."""
        with self._lock:
            return self.done or self.handle.stopped or self.triton.is_cancelled(self.incoming)

    def hold(self) -> None:
        """Send nothing more but the error :meth:`fail` will send; stop the sequence."""
        with self._lock:
            self.held = True
            self.handle.stopped = True

    def emit(self, em: Emission) -> None:
        with self._lock:
            if self.done or self.held:
                return
            if em.error is not None:
                self._fail(em.error)
            else:
                self._emit(em)

    def _fail(self, message: str) -> None:
        if self.done:
            return
        self.done = True
        self.model.ended(self)
        self.model.inflight.finished(self.handle)
        self.model.metrics.add("failed", 1)
        self.model._publish_gauges()
        wanted = self.incoming.requested_outputs
        if not self.sent or (wanted and ERROR_OUTPUT not in wanted):
            # Before data, or a caller that did not ask for the in-band error (an ensemble
            # step): one error response that ends the request. An ensemble runs its next step
            # for every response, so an in-band one would reach the postprocessing empty; and
            # Triton 2.51's ensemble never completes a request whose step sent its error and
            # its final flag apart (measured).
            self.triton.send_error(self.incoming, message)
            return
        # After data, Triton 2.51's BLS drops an error response (and an error response flagged
        # final never ends the caller's stream): the message goes in-band, then the final flag
        # on its own. The error response goes only to a caller that did not name its outputs
        # (a gRPC client): sent to a BLS caller, it also kept that caller's stream from ever
        # ending, and its stub from finalizing (measured: the router then held Triton's exit
        # for the whole exit timeout).
        text = np.array([[message.encode()]], dtype=object)
        self.triton.send(self.incoming, {ERROR_OUTPUT: text})
        if not wanted:
            self.triton.send_error(self.incoming, message, final=False)
        self.triton.close(self.incoming)

    def _emit(self, em: Emission) -> None:
        self.tokens += em.tokens
        extra: dict[str, np.ndarray] = {}
        if em.final:
            self.done = True
            self.model.ended(self)
            self.model.inflight.finished(self.handle)
            self.model.metrics.add("requests", 1)
            if em.cancelled:
                self.model.metrics.add("cancelled", 1)
            if em.first_scheduled_ns:
                self.model.metrics.add("queue_s", (em.first_scheduled_ns - self.arrival_ns) / 1e9)
            if (self.request.mode is RequestType.CONTEXT_ONLY and em.kv is not None and em.tokens
                    and not self.handle.stopped):
                extra = self._offer(em)
            self.model._publish_gauges()  # before the final response: a client may look
        if self.request.streaming:
            if em.tokens or extra:
                self.triton.send(self.incoming,
                                 {**token_outputs(em.tokens), **self._timing(em), **extra},
                                 final=em.final)
                self.sent = True
            elif em.final:
                self.triton.close(self.incoming)
        elif em.final:
            prompt = [] if self.request.exclude_input else list(self.request.prompt)
            tokens = prompt + self.tokens
            self.triton.send(self.incoming,
                             {**token_outputs(tokens), **self._timing(em), **extra}, final=True)

    def _timing(self, em: Emission) -> dict[str, np.ndarray]:
        values = {"arrival_time_ns": self.arrival_ns,
                  "first_scheduled_time_ns": em.first_scheduled_ns,
                  "first_token_time_ns": em.first_token_ns, "last_token_time_ns": time.time_ns()}
        return {k: np.array([[v]], dtype=np.int64) for k, v in values.items()}

    def _offer(self, em: Emission) -> dict[str, np.ndarray]:
        """Hold the prompt's KV for a decode instance; the ``context_phase_params`` output."""
        ucx = self.model.ucx
        assert ucx is not None and em.kv is not None
        buffer = pack_kv(em.kv)
        transfer_id = ucx.offer(buffer)
        self.model.inflight.offered(self.request.request_id, transfer_id, ucx.is_held)
        held = HeldKV(address=ucx.address, transfer_id=transfer_id,
                      kv_nbytes=int(buffer.nbytes), prompt_len=len(self.request.prompt),
                      layout=self.model.engine.layout)
        params = ContextPhaseParams(ctx_request_id=None, first_gen_tokens=tuple(em.tokens),
                                    opaque_state=held.encode(), draft_tokens=None,
                                    prompt_len=len(self.request.prompt))
        return {"context_phase_params": params.to_array().reshape(1, -1)}
