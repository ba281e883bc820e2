"""pdtrt's engine model for Triton (roles prefill, decode, aggregated) over TensorRT-LLM's LLM API.

Implements the ``tensorrt_llm`` I/O contract (:data:`pdtrt.engine_io.REFERENCE_ENGINE_IO`) that
the router and the ensembles speak, on ``LLM.generate_async`` with ``SamplingParams`` and
``DisaggregatedParams`` -- ``tensorrt_llm``'s on a GPU, pdtrt's CPU reference otherwise
(:func:`pdtrt.llmapi.load_llm_api`); the surface it may touch is pinned in
``pdtrt/data/targets/trtllm-1.2-llmapi.yaml`` and a contract test holds it to that.

Requests are parsed strictly at the edge (:mod:`pdtrt.runtime.request_parsing`); ``request_type``
context_only / generation_only map onto ``DisaggregatedParams``, and ``context_phase_params``
carries the context result's disaggregated params between them in pdtrt's versioned encoding
(:mod:`pdtrt.runtime.phase_params`). The model is decoupled and serves many requests per
instance: ``execute`` hands each one to the instance's asyncio loop thread, where a task drives
its result (:class:`~pdtrt.runtime.engine.responder.Responder`: exactly one final response). A
``stop`` request (same request id, ``stop`` = true) and a client's cancellation abort the result
(``abort()``). A context-only request that has finished holds its KV for a decode until the
phase's ``kv_transfer_timeout_ms`` runs out; as in TensorRT-LLM 1.2 nothing frees it earlier
(a stop or abort of a finished request is ignored upstream), so the engine model counts those
hand-offs until their timeout (``pdtrt_kv_held_buffers``). A context result that ended at its
end id hands nothing on (:class:`~pdtrt.runtime.engine.responder.Responder`).
Per-instance stats (in flight, queued, KV usage, KV transfers) become Prometheus metrics. On
SIGTERM every request in flight ends with "the server is shutting down" and new ones are refused
(:meth:`TritonPythonModel.drain`); ``finalize`` shuts the LLM down and releases the seam. A
drain *request* instead lets the requests in flight finish and only refuses new ones
(:mod:`~pdtrt.runtime.engine.drain`).
All of Triton goes through the injected seam (:class:`~pdtrt.runtime.triton_io.Triton`).

A request setting an input the configured sampler would ignore (TorchSampler: penalties, bad
words, a sampled request's seed, ``min_length`` > 1) is refused before it reaches the LLM
(:mod:`~pdtrt.runtime.engine.sampler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from pdtrt.engine_io import (
    DRAIN_OUTPUT,
    KV_CAPACITY_CURSOR,
    KV_EVENTS_OUTPUT,
    PROBE_ID_PREFIX,
    REFERENCE_ENGINE_IO,
    DrainAction,
    RequestType,
)
from pdtrt.errors import InvalidRequestError, KVTransferError
from pdtrt.llmapi import LLMApi, load_llm_api
from pdtrt.llmapi.check import PINNED_VERSION, ApiSurface, check_llm_api
from pdtrt.runtime.engine.config import LLMEngineConfig, engine_limits
from pdtrt.runtime.engine.drain import NOT_ADMITTED, PROBED, DrainState
from pdtrt.runtime.engine.inflight import InflightRequests
from pdtrt.runtime.engine.kv_events import KvEventLog, events_enabled
from pdtrt.runtime.engine.metrics import METRICS, StatsPublisher
from pdtrt.runtime.engine.responder import Responder
from pdtrt.runtime.engine.sampler import check_sampler
from pdtrt.runtime.faults import FaultInjection, KVTransferFaults
from pdtrt.runtime.metrics import Metrics
from pdtrt.runtime.request_parsing import (
    DrainRequest,
    EngineRequest,
    KvEventsRequest,
    StopRequest,
    parse_engine_request,
)
from pdtrt.runtime.shutdown import SETTLE_S, SHUTTING_DOWN
from pdtrt.runtime.triton_io import Incoming, Triton, model_params
from pdtrt.tracing_settings import stub_settings

if TYPE_CHECKING:
    from pdtrt.runtime.engine.trace import EngineTracing

__all__ = ["TritonPythonModel"]

log = logging.getLogger(__name__)

_POLL_S = 0.05  # how often client cancellations are looked for
_STATS_EVERY = 10  # polls between two stats refreshes (held KV expires without a request)


class TritonPythonModel:
    def __init__(self, triton: Triton, *, clock: Callable[[], float] = time.monotonic,
                 load_api: Callable[[], LLMApi] | None = None) -> None:
        self.triton = triton
        self.clock = clock  # seconds: held KV's timeouts, finalize's deadline and step times
        self.load_api = load_api  # the LLM API this stub runs on (tests: a twin variant)

    def initialize(self, args: dict[str, Any]) -> None:
        config = LLMEngineConfig.from_params(model_params(args))
        if config.ucx_tls:
            os.environ["UCX_TLS"] = ",".join(config.ucx_tls)  # read when UCX starts
        if (devices := config.visible_devices(args["model_instance_name"])) is not None:
            # before tensorrt_llm loads, as TensorRT-LLM's own llmapi Triton model does
            # (triton_backend/all_models/llmapi/tensorrt_llm/1/model.py at 044a90d209e3):
            # CUDA reads CUDA_VISIBLE_DEVICES; the LLM API's MpiPoolSession forwards only
            # TRTLLM*/TLLM* variables to its MPI workers, which turn TRTLLM_VISIBLE_DEVICES
            # into theirs; gpus_per_node keeps the workers' rank -> GPU mapping on these GPUs
            os.environ["CUDA_VISIBLE_DEVICES"] = devices
            os.environ["TRTLLM_VISIBLE_DEVICES"] = devices
            config = dataclasses.replace(config, options={
                **config.options, "gpus_per_node": len(devices.split(","))})
        api = (self.load_api or load_llm_api)()
        surface = self.check(api, config)  # before the LLM starts: a mismatch stops the load
        llm = api.LLM(str(config.model), skip_tokenizer_init=True, **config.options)
        name = args["model_name"]
        self.setup(config, api, llm, model_name=name,
                   faults=FaultInjection.from_env(config.role, model=name),
                   kv_faults=KVTransferFaults.from_env(config.role, name), surface=surface)

    @staticmethod
    def check(api: LLMApi, config: LLMEngineConfig) -> ApiSurface:
        """The library's surface against what this model needs (:mod:`pdtrt.llmapi.check`):
        raises :class:`~pdtrt.errors.LLMApiMismatchError` naming what is missing; logs the
        differences that change nothing but the fields passed, once."""
        surface = check_llm_api(api, config.options)
        # another release is worth a warning; a field it lacks that pdtrt can do without is not
        other = not surface.version.startswith(PINNED_VERSION)
        for note in surface.notes():
            (log.warning if other else log.info)("LLM API: %s", note)
        return surface

    def setup(self, config: LLMEngineConfig, api: LLMApi, llm: Any, *, model_name: str,
              faults: Any = None, kv_faults: KVTransferFaults | None = None,
              model_config: dict[str, Any] | None = None,
              surface: ApiSurface | None = None) -> None:
        """Serve ``llm`` (``initialize`` builds it from ``config``; tests pass their own)."""
        self.surface = surface or self.check(api, config)
        self.config, self.api, self.llm = config, api, llm
        self.limits = engine_limits(config, model_config)
        self.metrics = Metrics(self.triton, METRICS, {"model": model_name})
        self.stats = StatsPublisher(
            self.metrics, llm,
            transfer_stats=llm._pdtrt_kv_transfer_stats if api.is_reference else None)
        self.inflight = InflightRequests()
        # the blocks this instance holds, for routers' KV indexes; None: no events recorded
        self.kv_events = KvEventLog(lambda: llm.get_kv_cache_events(0)) \
            if events_enabled(config.options) else None
        # a span per request that brings a traceparent, when the environment names a
        # collector (pdtrt.tracing_settings); None: off, nothing traced or imported
        self.tracing = _tracing(model_name, str(config.role))
        self.draining = False  # the server is stopping: nothing new is admitted
        self.retiring = False  # drained on request: nothing new, those in flight finish
        self._live: set[Responder] = set()  # requests without their final response yet
        self._by_engine_id: dict[int, str] = {}  # the LLM's request id -> Triton's
        self._lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="pdtrt-llm-loop",
                                        daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._poll(), self.loop)
        if (faults is not None or kv_faults is not None) and api.is_reference:
            llm._pdtrt_set_fault_hook(_FaultHook(faults, kv_faults, self._by_engine_id,
                                                 self.triton.kill_process))
        self.triton.on_server_stop(self.drain)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def publish(self) -> None:
        self.stats.publish(num_live=self.inflight.num_live,
                           num_held=self.inflight.num_held(self.clock()))

    # -- requests ----------------------------------------------------------------------------
    def execute(self, requests: list[Any]) -> None:
        admitted: list[Responder] = []
        for incoming in self.triton.receive(requests, REFERENCE_ENGINE_IO.input_names,
                                            decoupled=True):
            arrival_ns = time.time_ns()
            try:
                request = parse_engine_request(incoming, self.limits)
                if isinstance(request, StopRequest):
                    self._stop(incoming, request)
                elif isinstance(request, KvEventsRequest):
                    self._kv_events(incoming, request)
                elif isinstance(request, DrainRequest):
                    self._drain_request(incoming, request)
                else:
                    admitted.append(self._admit(incoming, request, arrival_ns))
            except (InvalidRequestError, KVTransferError) as exc:
                self.triton.send_error(incoming, exc.message)
            except Exception as exc:  # a bug: still one final response, and the traceback
                log.exception("engine model failure on request %r", incoming.request_id)
                self.triton.send_error(incoming, f"engine model failure: {exc}")
        if admitted:  # submitted together, so the engine can schedule them together
            asyncio.run_coroutine_threadsafe(self._submit(admitted), self.loop)
        self.publish()
        return None

    def _admit(self, incoming: Incoming, request: EngineRequest, arrival_ns: int) -> Responder:
        # what the configured sampler would ignore is refused, not served as if it were fine
        check_sampler(request.sampling, self.config.options, self.config.role)
        handle = self.inflight.register(request.request_id)
        out = Responder(self, incoming, request, arrival_ns=arrival_ns, handle=handle)
        if self.tracing is not None:
            out.trace_parent = self.tracing.parent(incoming.parameters)
        with self._lock:
            if self.draining or self.retiring:
                self.inflight.finished(handle)
                raise InvalidRequestError(SHUTTING_DOWN if self.draining else NOT_ADMITTED)
            self._live.add(out)
        return out

    def _sampling_params(self, request: EngineRequest, *, perf_metrics: bool = False) -> Any:
        """The LLM API's ``SamplingParams`` for ``request`` (tensorrt_llm/sampling_params.py,
        commit 000a01de66f0eab4ab05640711f0253f50f5209c): greedy requests ask for top_k 1,
        greedy in every sampler (``_greedy_decoding``: top_k None/1, top_p None/0); no
        ``end_id`` becomes -1, a token id that never comes (the LLM API needs one when it has
        no tokenizer); 0 for top_k / top_p means "not set", as in the ``tensorrt_llm`` model.

        Penalties and ``min_tokens`` map one to one; ``return_log_probs`` is ``logprobs=k``:
        k the request's ``num_top_log_probs``, at least 1 (the PyTorch flow returns log-probs
        when ``logprobs`` is truthy, the top-k of each token's distribution: one
        ``{token: Logprob}`` per output token, ``executor/result.py`` ``CompletionOutput``).
        Word lists: one-token words are ``stop_token_ids`` / ``bad_token_ids``; longer ones go
        in ``_stop_word_ids`` / ``_bad_word_ids`` with ``stop`` / ``bad`` naming them -- the
        fields ``_setup`` fills from strings, which ``generate_async`` calls only when
        ``end_id`` is None, and this model always sets ``end_id`` (``_prepare_sampling_params``,
        llm.py at 4c05a74891e4df8066f08ed4ce14b0972abe4e25). ``include_stop_str_in_output`` keeps a
        matched stop word in the output, as NVIDIA's ``tensorrt_llm`` model returns it (the
        LLM API would cut it from the last response after earlier responses streamed it).
        ``perf_metrics`` (a traced generation-only request): ``return_perf_metrics``, for the
        KV transfer's times and bytes (:mod:`~pdtrt.runtime.engine.trace`)."""
        s = request.sampling
        common: dict[str, Any] = {
            "max_tokens": request.max_new_tokens,
            "end_id": -1 if request.end_id is None else request.end_id,
            "repetition_penalty": _unless(s.repetition_penalty, 1.0),
            "presence_penalty": _unless(s.presence_penalty, 0.0),
            "frequency_penalty": _unless(s.frequency_penalty, 0.0),
            "min_tokens": s.min_tokens or None,
            "logprobs": max(1, s.num_top_log_probs) if s.return_log_probs else None,
            "include_stop_str_in_output": True,
            "stop_token_ids": [w[0] for w in s.stop_words if len(w) == 1] or None,
            "bad_token_ids": [w[0] for w in s.bad_words if len(w) == 1] or None,
        }
        long_stop = [list(w) for w in s.stop_words if len(w) > 1]
        long_bad = [list(w) for w in s.bad_words if len(w) > 1]
        if perf_metrics and request.mode is RequestType.GENERATION_ONLY:
            common["return_perf_metrics"] = True
        if long_stop:
            common["stop"] = [_word_name(w) for w in long_stop]
        if long_bad:
            common["bad"] = [_word_name(w) for w in long_bad]
        if s.greedy:
            params = self.api.SamplingParams(top_k=1, **common)
        else:
            params = self.api.SamplingParams(temperature=s.temperature, top_k=s.top_k or None,
                                             top_p=s.top_p or None, seed=s.seed or 0, **common)
        if long_stop:
            params._stop_word_ids = long_stop
        if long_bad:
            params._bad_word_ids = long_bad
        return params

    async def _submit(self, outs: list[Responder]) -> None:
        """``generate_async`` for each request (on this loop: the results wait on it), then one
        task per request drives its result."""
        for out in outs:
            if out.done or out.held:  # drained before it reached the engine
                continue
            try:
                result = self.llm.generate_async(
                    list(out.request.prompt),
                    sampling_params=self._sampling_params(
                        out.request, perf_metrics=out.trace_parent is not None),
                    streaming=out.request.streaming,
                    disaggregated_params=self._disaggregated_params(out.request))
            except Exception as exc:
                out.fail(str(getattr(exc, "message", exc)))
                continue
            self.stats.submitted = True
            self._by_engine_id[result.request_id] = out.request.request_id
            out.attach(result)
            asyncio.get_running_loop().create_task(self._serve(out, result))

    def _disaggregated_params(self, request: EngineRequest) -> Any:
        if request.mode is RequestType.CONTEXT_ONLY:
            return self.api.DisaggregatedParams(request_type=str(request.mode))
        if request.context_phase_params is not None:
            return request.context_phase_params.to_disaggregated(
                self.api.DisaggregatedParams,
                has=lambda name: self.surface.has("DisaggregatedParams", name))
        return None

    async def _serve(self, out: Responder, result: Any) -> None:
        try:
            async for step in result:
                out.update(step)
            if not out.done and not out.held:  # no final step came: still one final
                out.fail("the engine ended the request without a final response")
        except Exception as exc:
            if not out.held:  # held: the drain sends the one final error
                out.fail(str(getattr(exc, "message", exc)))
        finally:
            self._by_engine_id.pop(result.request_id, None)

    def _stop(self, incoming: Incoming, stop: StopRequest) -> None:
        """The ``tensorrt_llm`` stop request: abort ``request_id``'s running results. KV a
        finished context-only result holds stays until its timeout (nothing upstream frees it)."""
        result = self.inflight.stop(stop.request_id, self.clock())
        with self._lock:
            live = [o for o in self._live if o.request.request_id == stop.request_id]
        for out in live:
            out.abort()
        log.info("stop %s: %d sequence(s) stopped; %d held KV left to its timeout",
                 stop.request_id, result.sequences, result.held)
        self.publish()
        if self.retiring and stop.request_id.startswith(PROBE_ID_PREFIX):
            self.triton.send_error(incoming, PROBED)  # routers: alive, but choose it no more
        else:
            self.triton.send(incoming, {}, final=True)

    def _drain_request(self, incoming: Incoming, request: DrainRequest) -> None:
        """Start a drain, end it, or say how far it is (:mod:`pdtrt.runtime.engine.drain`)."""
        if request.action is not DrainAction.STATUS:
            with self._lock:
                self.retiring = request.action is DrainAction.DRAIN
            log.warning("drain: %s", "taking no new requests; finishing those in flight"
                        if self.retiring else "taking new requests again")
        state = DrainState(draining=self.retiring, num_in_flight=self.inflight.num_live,
                           num_held=self.inflight.num_held(self.clock()))
        self.triton.send(incoming, {DRAIN_OUTPUT: np.array([state.to_json().encode()],
                                                           dtype=np.object_)}, final=True)

    def _kv_events(self, incoming: Incoming, request: KvEventsRequest) -> None:
        """The blocks this instance holds, since the router's cursor (``kv_events``); for the
        cursor :data:`~pdtrt.engine_io.KV_CAPACITY_CURSOR`, its KV capacity instead."""
        if request.cursor == KV_CAPACITY_CURSOR:
            self.publish()  # as fresh as the LLM's stats
            answer = json.dumps(self.stats.kv_capacity)
        elif self.kv_events is None:
            raise InvalidRequestError(  # NO_EVENTS of pdtrt.runtime.router.kv_index
                "this engine records no KV cache events (kv_cache_config.enable_block_reuse "
                "and event_buffer_max_size are off): enable block reuse in the pool's engine "
                "section, or route without the KV index (router.routing least_load)")
        else:
            answer = self.kv_events.answer(request.cursor)
        self.triton.send(incoming, {KV_EVENTS_OUTPUT: np.array([answer.encode()],
                                                               dtype=np.object_)}, final=True)

    def offered(self, request_id: str) -> None:
        """A context-only request finished and its KV is held for a decode to pull."""
        self.inflight.offered(request_id, self.clock() + self.config.kv_transfer_timeout_s)

    def ended(self, out: Responder) -> None:
        """``out``'s final response is going out (its span too, when traced)."""
        with self._lock:
            self._live.discard(out)
        self.inflight.finished(out.handle)
        if self.tracing is not None and out.trace_parent is not None:
            try:
                self.tracing.record(out)
            except Exception:  # a span must never cost a request its final response
                log.exception("tracing request %r failed", out.request.request_id)

    async def _poll(self) -> None:
        """Abort the results whose clients have gone; refresh the stats."""
        tick = 0
        while True:
            await asyncio.sleep(_POLL_S)
            with self._lock:
                live = list(self._live)
            for out in live:
                if out.client_gone():
                    out.abort()
            if self.kv_events is not None:  # the engine's buffer drops what is not drained
                self.kv_events.drain()
            tick += 1
            if tick % _STATS_EVERY == 0:
                await asyncio.to_thread(self.publish)

    # -- the end -----------------------------------------------------------------------------
    def drain(self) -> None:
        """The server is stopping (SIGTERM, or finalize): every request in flight ends now with
        :data:`SHUTTING_DOWN` (its result is aborted), new ones are refused."""
        with self._lock:
            self.draining = True
            live, self._live = list(self._live), set()
        for out in live:
            out.hold()
            out.abort()
        if live:
            time.sleep(SETTLE_S)  # the responses already sent go through their ensemble steps
        for out in live:
            out.fail(SHUTTING_DOWN)
        if live:
            log.info("drained %d request(s) in flight", len(live))
        self.publish()

    def finalize(self) -> None:
        """Drain, stop the loop, shut the LLM down (its threads, UCX, held KV), then release
        the seam -- in that order, so no thread touches the stub once it tears down. The waits
        share :data:`_FINALIZE_S`, below Triton's exit timeout (a model still unloading then
        makes the whole server exit with status 1); a step that takes over a second is logged
        with its time, so that a slow stop names its cause."""
        if self.loop.is_closed():
            return
        deadline = self.clock() + _FINALIZE_S
        with _timed("all its steps", self.clock):
            self._finalize(deadline)

    def _finalize(self, deadline: float) -> None:
        clock = self.clock
        with _timed("drain", clock):
            self.drain()
        with _timed("ending its tasks", clock):
            try:
                asyncio.run_coroutine_threadsafe(_cancel_tasks(), self.loop).result(
                    timeout=_left(deadline, clock))
            except Exception:  # a task that will not end must not keep the stub from finalizing
                log.exception("ending the engine model's tasks")
        self.loop.call_soon_threadsafe(self.loop.stop)
        with _timed("stopping its event loop", clock):
            self._thread.join(timeout=_left(deadline, clock))
        if not self._thread.is_alive():
            self.loop.close()
        with _timed("shutting the LLM down", clock):
            self.llm.shutdown()
        self.stats.detach()
        if self.tracing is not None:  # the last requests' spans go out before the stub ends
            with _timed("flushing its traces", clock):
                self.tracing.shutdown()
        with _timed("releasing its metrics", clock):
            self.triton.release()


# finalize's waits in all: Triton's exit timeout is 10 s (pdtrt.serve.triton_server), and the
# LLM's own shutdown (scheduler thread, UCX) comes after them
_FINALIZE_S = 5.0
_SLOW_STEP_S = 1.0


def _left(deadline: float, clock: Callable[[], float]) -> float:
    return max(deadline - clock(), 0.1)


@contextlib.contextmanager
def _timed(step: str, clock: Callable[[], float]) -> Iterator[None]:
    start = clock()
    try:
        yield
    finally:
        took = clock() - start
        if took > _SLOW_STEP_S:
            log.warning("finalize: %s took %.1f s", step, took)


async def _cancel_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class _FaultHook:
    """The reference LLM's decode-step hook, by Triton request id
    (:mod:`pdtrt.runtime.faults`)."""

    def __init__(self, faults: FaultInjection | None, kv_faults: KVTransferFaults | None,
                 by_engine_id: dict[int, str], kill: Callable[[], None]) -> None:
        self.faults, self.kv_faults, self.by_engine_id = faults, kv_faults, by_engine_id
        self.kill_process = kill  # the seam's: between two stub calls, never inside one

    def before_decode(self, request_ids: list[str]) -> None:
        if self.faults is not None:
            self.faults.before_decode([self.by_engine_id.get(int(r), r) for r in request_ids])

    def kv_transfer_fault(self, request_id: str) -> str | None:
        """Asked when a finished context request's KV is offered (its id still maps)."""
        if self.kv_faults is None:
            return None
        return self.kv_faults.kv_transfer_fault(
            self.by_engine_id.get(int(request_id), request_id))


def _tracing(model_name: str, role: str) -> EngineTracing | None:
    """This engine's tracer when its environment names a collector; the tracing modules (and
    OpenTelemetry) load only then."""
    settings = stub_settings()
    if settings is None:
        return None
    from pdtrt.runtime.engine.trace import EngineTracing

    return EngineTracing(settings, model_name, role)


def _unless(value: float, neutral: float) -> float | None:
    """None (the runtime's default) for a value that asks for nothing."""
    return None if value == neutral else value


def _word_name(word: list[int]) -> str:
    """What ``stop`` / ``bad`` say for a word given by token ids (the stop reason a result
    reports): its ids."""
    return "ids:" + ",".join(str(t) for t in word)
