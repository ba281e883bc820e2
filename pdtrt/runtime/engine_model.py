"""pdtrt's engine model for Triton (roles prefill, decode, aggregated) over the reference engine.

Implements the core ``tensorrt_llm`` contract (:data:`pdtrt.engine_io.REFERENCE_ENGINE_IO`):
``request_type`` context_only / generation_only / context_and_generation (request parameter),
``context_phase_params`` out of a context-only request and into the generation-only one,
streaming, greedy and seeded sampling, ``end_id``, max tokens, timing outputs, and ``stop``:
like the ``tensorrt_llm`` model, a request with ``stop`` = true stops the in-flight request with
the same request id (and, on the prefill side, frees the KV it still holds). Requests are
validated against the engine limits before anything is allocated. The model is decoupled:
``execute`` hands requests to the in-flight scheduler and returns at once; generation-only
requests first pull their KV over UCX on a worker thread.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from pdtrt.engine_io import ERROR_OUTPUT, Param, RequestType, Role
from pdtrt.errors import KVTransferError
from pdtrt.runtime.faults import FaultInjection
from pdtrt.runtime.inflight import InflightRequests, StopHandle
from pdtrt.runtime.kv_transfer import UcxKVNode
from pdtrt.runtime.phase_params import ContextPhaseParams
from pdtrt.runtime.reference_engine import SamplingParams, load_reference_engine, pack_kv, unpack_kv
from pdtrt.runtime.scheduler import Emission, Scheduler, SeqRequest
from pdtrt.runtime.triton_io import (
    FINAL,
    PB_LOCK,
    Metrics,
    RequestError,
    model_params,
    request_parameters,
    scalar,
    send_error,
    tensor,
    token_outputs,
)

log = logging.getLogger(__name__)

_METRICS = {
    "kv_seconds": ("pdtrt_kv_transfer_seconds_total",
                   "Seconds spent pulling KV caches over UCX (decode side)", "COUNTER"),
    "kv_count": ("pdtrt_kv_transfers_total", "KV caches pulled (decode side)", "COUNTER"),
    "kv_bytes": ("pdtrt_kv_transfer_bytes_total", "KV bytes pulled over UCX", "COUNTER"),
    "kv_held": ("pdtrt_kv_held_buffers", "KV caches held for a decode pull", "GAUGE"),
    "kv_expired": ("pdtrt_kv_expired_total", "Held KV caches freed by timeout", "GAUGE"),
    "kv_released": ("pdtrt_kv_released_total", "Held KV caches freed early by a stop",
                    "GAUGE"),
    "cancelled": ("pdtrt_engine_cancelled_total",
                  "Sequences stopped before their end (client cancel or stop request)", "COUNTER"),
    "failed": ("pdtrt_engine_failed_total", "Requests that ended in an engine error", "COUNTER"),
    "queue_s": ("pdtrt_engine_queue_seconds_total",
                "Seconds requests waited before the scheduler took them", "COUNTER"),
    "requests": ("pdtrt_engine_requests_total", "Requests the engine finished", "COUNTER"),
    "active": ("pdtrt_engine_active_sequences",
               "Sequences the engine holds (waiting or running)", "GAUGE"),
}


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        p = model_params(args)
        self.role = Role(p[Param.ROLE])
        self.max_input_len = int(p[Param.MAX_INPUT_LEN])
        self.max_seq_len = int(p[Param.MAX_SEQ_LEN])
        self.engine = load_reference_engine(Path(p[Param.ENGINE_DIR]),
                                            tokens_per_block=int(p[Param.TOKENS_PER_BLOCK]))
        self.vocab_size = int(self.engine.model.config.vocab_size)
        self.ucx: UcxKVNode | None = None
        if self.role in (Role.PREFILL, Role.DECODE):
            self.ucx = UcxKVNode(transports=tuple(p[Param.UCX_TLS].split(",")),
                                 timeout_s=float(p[Param.KV_TRANSFER_TIMEOUT_S]),
                                 on_change=self._publish_gauges)
            self.ucx.start()
        self.inflight = InflightRequests()
        self.scheduler = Scheduler(self.engine, max_batch_size=int(p[Param.MAX_BATCH_SIZE]),
                                   max_num_tokens=int(p[Param.MAX_NUM_TOKENS]),
                                   faults=FaultInjection.from_env(self.role))
        self.scheduler.start()
        self.pulls = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pdtrt-kv-pull")
        self.metrics = Metrics(_METRICS, {"model": args["model_name"]})

    def _publish_gauges(self) -> None:
        self.metrics.set("active", self.inflight.num_live)
        if self.ucx is not None:
            self.metrics.set("kv_held", len(self.ucx.stats.held))
            self.metrics.set("kv_expired", self.ucx.stats.expired)
            self.metrics.set("kv_released", self.ucx.stats.released)

    # -- requests ----------------------------------------------------------------------------
    def execute(self, requests: list[Any]) -> None:
        with PB_LOCK:
            for request in requests:
                sender = request.get_response_sender()
                try:
                    self._admit(request, sender)
                except (RequestError, KVTransferError) as exc:
                    send_error(sender, str(getattr(exc, "message", exc)))
            self._publish_gauges()
        return None

    def _admit(self, request: Any, sender: Any) -> None:
        arrival_ns = time.time_ns()
        if scalar(request, "stop", False):
            self._stop(request.request_id(), sender)
            return
        ids = tensor(request, "input_ids")
        if ids is None or ids.size == 0:
            raise RequestError("input 'input_ids' is required and must not be empty")
        n = int(scalar(request, "input_lengths", ids.shape[-1]))
        prompt = [int(t) for t in ids.reshape(-1)[:n]]
        max_new = int(scalar(request, "request_output_len", required=True))
        if not 0 < n <= self.max_input_len:
            raise RequestError(f"prompt of {n} tokens; this engine takes 1..{self.max_input_len}")
        if max_new < 1 or n + max_new > self.max_seq_len:
            raise RequestError(f"request_output_len {max_new} with a {n}-token prompt exceeds "
                               f"max_seq_len {self.max_seq_len} (or is < 1)")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise RequestError(f"input_ids outside the vocabulary [0, {self.vocab_size})")
        mode = request_parameters(request).get("request_type", RequestType.CONTEXT_AND_GENERATION)
        if mode not in tuple(RequestType):
            raise RequestError(f"unknown request_type '{mode}'")
        mode = RequestType(mode)
        if mode != RequestType.CONTEXT_AND_GENERATION and self.ucx is None:
            raise RequestError(f"the {self.role} model does not serve {mode} requests")
        end_id = scalar(request, "end_id")
        top_k = int(scalar(request, "runtime_top_k", 0))
        top_p = float(scalar(request, "runtime_top_p", 0.0))
        sampling = SamplingParams(temperature=float(scalar(request, "temperature", 1.0)),
                                  top_k=top_k, top_p=top_p,
                                  seed=int(scalar(request, "random_seed", 0)))
        params = None
        if mode == RequestType.GENERATION_ONLY:
            raw = tensor(request, "context_phase_params")
            if raw is None:
                raise RequestError("generation_only requests need 'context_phase_params'")
            params = ContextPhaseParams.from_array(raw)
            if params.layout != self.engine.layout:
                raise RequestError(f"KV layout of the prefill ({params.layout}) differs from "
                                   f"this engine's ({self.engine.layout})")
            if params.prompt_len != n:
                raise RequestError(f"context_phase_params hold {params.prompt_len} tokens of KV "
                                   f"but the prompt has {n}")
        handle = self.inflight.register(request.request_id())
        out = _Responder(self, sender, mode=mode, prompt=prompt, request_id=request.request_id(),
                         streaming=bool(scalar(request, "streaming", False)),
                         exclude_input=bool(scalar(request, "exclude_input_in_output", False)),
                         arrival_ns=arrival_ns, handle=handle)
        seq = SeqRequest(request_id=request.request_id(), prompt=prompt, max_new_tokens=max_new,
                         end_id=None if end_id is None or int(end_id) < 0 else int(end_id),
                         sampling=sampling, mode=mode, emit=out.emit,
                         is_cancelled=lambda: handle.stopped or _locked(request.is_cancelled))
        if params is not None:
            self.pulls.submit(self._pull_then_submit, seq, params, out)
        else:
            self.scheduler.submit(seq)

    def _stop(self, request_id: str, sender: Any) -> None:
        """The ``tensorrt_llm`` stop request: stop ``request_id``'s sequences, free its KV."""
        if not request_id:
            raise RequestError("a stop request needs the request id of the request to stop")
        result = self.inflight.stop(request_id)
        if self.ucx is not None:
            for transfer_id in result.transfers:
                self.ucx.release(transfer_id)
        log.info("stop %s: %d sequence(s), %d held KV", request_id, result.sequences,
                 len(result.transfers))
        sender.send(pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)

    def _pull_then_submit(self, seq: SeqRequest, params: ContextPhaseParams,
                          out: _Responder) -> None:
        try:
            start = time.perf_counter()
            assert self.ucx is not None
            buffer = self.ucx.pull(params.ucx_address, params.transfer_id, params.kv_nbytes)
            seq.imported_kv = unpack_kv(buffer, self.engine.layout, params.prompt_len)
            seq.first_tokens = params.first_tokens
            self.metrics.add("kv_seconds", time.perf_counter() - start)
            self.metrics.add("kv_count", 1)
            self.metrics.add("kv_bytes", params.kv_nbytes)
        except Exception as exc:
            with PB_LOCK:
                out.fail(f"KV transfer failed: {getattr(exc, 'message', exc)}")
            return
        self.scheduler.submit(seq)

    def finalize(self) -> None:
        self.scheduler.stop()
        self.pulls.shutdown(wait=False, cancel_futures=True)
        if self.ucx is not None:
            self.ucx.stop()


def _locked(call: Any) -> Any:
    with PB_LOCK:
        return call()


class _Responder:
    """Turns one request's scheduler emissions into Triton responses."""

    def __init__(self, model: TritonPythonModel, sender: Any, *, mode: str, prompt: list[int],
                 request_id: str, streaming: bool, exclude_input: bool, arrival_ns: int,
                 handle: StopHandle) -> None:
        self.model, self.sender, self.mode, self.prompt = model, sender, mode, prompt
        self.request_id, self.streaming, self.exclude_input = request_id, streaming, exclude_input
        self.arrival_ns, self.handle = arrival_ns, handle
        self.tokens: list[int] = []
        self.done = False
        self.sent = False  # a response with data went out

    def fail(self, message: str) -> None:
        """End the request with an error (call with PB_LOCK held)."""
        if self.done:
            return
        self.done = True
        self.model.inflight.finished(self.handle)
        self.model.metrics.add("failed", 1)
        self.model._publish_gauges()
        if not self.sent:
            send_error(self.sender, message)
        else:
            # After data, Triton 2.51's BLS drops an error response (and an error response
            # flagged final never ends the caller's stream): the message goes in-band first,
            # then the error response for gRPC clients, then the final flag on its own.
            text = np.array([[message.encode()]], dtype=object)
            self.sender.send(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(ERROR_OUTPUT, text)]))
            self.sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
            self.sender.send(flags=FINAL)

    def _timing(self, em: Emission) -> list[Any]:
        values = {"arrival_time_ns": self.arrival_ns,
                  "first_scheduled_time_ns": em.first_scheduled_ns,
                  "first_token_time_ns": em.first_token_ns, "last_token_time_ns": time.time_ns()}
        return [pb_utils.Tensor(k, np.array([[v]], dtype=np.int64)) for k, v in values.items()]

    def emit(self, em: Emission) -> None:
        with PB_LOCK:
            self._emit(em)

    def _emit(self, em: Emission) -> None:
        if self.done:
            return
        if em.error is not None:
            self.fail(em.error)
            return
        self.tokens += em.tokens
        extra: list[Any] = []
        if em.final:
            self.done = True
            self.model.inflight.finished(self.handle)
            self.model.metrics.add("requests", 1)
            if em.cancelled:
                self.model.metrics.add("cancelled", 1)
            if em.first_scheduled_ns:
                self.model.metrics.add("queue_s", (em.first_scheduled_ns - self.arrival_ns) / 1e9)
            if (self.mode == RequestType.CONTEXT_ONLY and em.kv is not None and em.tokens
                    and not self.handle.stopped):
                extra.append(self._offer(em))
            self.model._publish_gauges()  # before the final response: a client may look
        if self.streaming:
            if em.tokens or extra:
                response = pb_utils.InferenceResponse(
                    output_tensors=token_outputs(em.tokens) + self._timing(em) + extra)
                self.sender.send(response, flags=FINAL if em.final else 0)
                self.sent = True
            elif em.final:
                self.sender.send(flags=FINAL)
        elif em.final:
            tokens = self.tokens if self.exclude_input else self.prompt + self.tokens
            response = pb_utils.InferenceResponse(
                output_tensors=token_outputs(tokens) + self._timing(em) + extra)
            self.sender.send(response, flags=FINAL)

    def _offer(self, em: Emission) -> Any:
        ucx = self.model.ucx
        assert ucx is not None and em.kv is not None
        buffer = pack_kv(em.kv)
        transfer_id = ucx.offer(buffer)
        self.model.inflight.offered(self.request_id, transfer_id, ucx.is_held)
        params = ContextPhaseParams(
            request_id=self.request_id, first_tokens=tuple(em.tokens),
            prompt_len=len(self.prompt), ucx_address=ucx.address,
            transfer_id=transfer_id, kv_nbytes=int(buffer.nbytes),
            layout=self.model.engine.layout)
        return pb_utils.Tensor("context_phase_params", params.to_array().reshape(1, -1))
