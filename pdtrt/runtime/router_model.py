"""pdtrt's disaggregated router: a decoupled, asynchronous BLS model (DESIGN §3).

Per request: a context-only request to the prefill model returns the first token and the
``context_phase_params``; the first token goes to the client at once (``early_first_token``);
then a generation-only request to the decode model streams the rest, relayed without repeating
the first token. Many requests are in flight per instance (``async def execute``). Prompts
shorter than ``aggregated_below_tokens`` go to the aggregated model. Every failure becomes a
request error, and every stream ends with a final response.

Request ids and cancellation: both phases see the client's request id with a unique suffix
(``<id>~<hex>``). When the client cancels (seen by ``request.is_cancelled()``), the router
sends the phase in flight TensorRT-LLM's stop request -- same id, input ``stop`` = true --
which stops the sequence and, on the prefill side, frees the KV it holds. Triton 2.51 has no
way to cancel a BLS request (no ``cancel()`` on the response iterator) and does not pass an
ensemble request's cancellation on to the composing model in flight, so the stop request is
the mechanism; a client cancels by streaming to the ``router`` model itself (see docs/serve.md).
The router also frees the prefill's KV whenever no decode phase will pull it (decode failure,
a one-token request).

Pools: the prefill and decode models are called in this server (BLS) or, when the router's
``prefill_url`` / ``decode_url`` parameter names another Triton server, over gRPC
(:mod:`pdtrt.runtime.phase_client`); the KV then moves between the two servers' engine
instances over UCX as before.

Prometheus metrics on Triton's metrics port: requests, errors, cancellations, TTFT, and
per-phase queue time (``first_scheduled_time_ns - arrival_time_ns`` reported by the engines).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from pdtrt.engine_io import REQUEST_TYPE_PARAMETER, ROUTER_IO, Param, RequestType
from pdtrt.runtime.phase_client import (
    BlsPhaseClient,
    GrpcPhaseClient,
    PhaseClient,
    PhaseResponse,
)
from pdtrt.runtime.triton_io import (
    FINAL,
    PB_LOCK,
    Metrics,
    RequestError,
    model_params,
    scalar,
    send_error,
    token_outputs,
)

_METRICS = {
    "requests": ("pdtrt_router_requests_total", "Requests routed", "COUNTER"),
    "errors": ("pdtrt_router_errors_total", "Requests that ended in an error", "COUNTER"),
    "cancelled": ("pdtrt_router_cancelled_total", "Requests cancelled by clients", "COUNTER"),
    "ttft_s": ("pdtrt_router_ttft_seconds_total",
               "Sum of router-side time to first token, seconds", "COUNTER"),
    "aggregated": ("pdtrt_router_aggregated_total", "Short requests sent to the aggregated path",
                   "COUNTER"),
    "prefill_queue_s": ("pdtrt_prefill_queue_seconds_total", "Sum of prefill queue time, seconds",
                        "COUNTER"),
    "decode_queue_s": ("pdtrt_decode_queue_seconds_total",
                       "Sum of decode queue time (after the KV pull), seconds", "COUNTER"),
}
log = logging.getLogger(__name__)
_PHASE_OUTPUTS = ["output_ids", "sequence_length", "arrival_time_ns", "first_scheduled_time_ns"]


class PhaseError(Exception):
    """A phase model answered with an error."""


def _send(sender: Any, *args: Any, **kwargs: Any) -> None:
    with PB_LOCK:
        sender.send(*args, **kwargs)


def _cancelled(request: Any) -> bool:
    with PB_LOCK:
        return bool(request.is_cancelled())


def _phase_id(client_id: str) -> str:
    """The id both phases see: the client's, made unique so a ``stop`` hits only this one."""
    return f"{client_id}~{secrets.token_hex(6)}" if client_id else secrets.token_hex(8)


# Triton 2.51's BLS response iterator is synchronous: each stream is drained on a worker thread
# so one router instance keeps many requests in flight.
_STREAM_THREADS = 256
# Inputs a ``stop`` request carries: the config's required ones, then stop = true.
_STOP_INPUTS = ("input_ids", "input_lengths", "request_output_len")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        p = model_params(args)
        self.prefill_model = p[Param.PREFILL_MODEL]
        self.decode_model = p[Param.DECODE_MODEL]
        self.aggregated_model = p.get(Param.AGGREGATED_MODEL, "")
        self.aggregated_below = int(p.get(Param.AGGREGATED_BELOW_TOKENS, "0") or 0)
        self.early_first_token = p.get(Param.EARLY_FIRST_TOKEN, "true") == "true"
        self.error_output = p.get(Param.ERROR_OUTPUT, "")
        # Scalars arrive reshaped to [batch]; a phase request must send the config shape
        # [batch, 1].
        self.inputs = {t.name: t.reshape_scalar for t in ROUTER_IO.inputs}
        self.pool = ThreadPoolExecutor(max_workers=_STREAM_THREADS,
                                       thread_name_prefix="pdtrt-router")
        local = BlsPhaseClient(self.pool)
        self.clients: dict[str, PhaseClient] = {
            self.prefill_model: _client(p.get(Param.PREFILL_URL, ""), local),
            self.decode_model: _client(p.get(Param.DECODE_URL, ""), local),
        }
        if self.aggregated_model:
            self.clients[self.aggregated_model] = local
        self.metrics = Metrics(_METRICS, {"model": args["model_name"]})

    async def execute(self, requests: list[Any]) -> None:
        await asyncio.gather(*(self._route(r) for r in requests))
        return None

    # -- one request -------------------------------------------------------------------------
    async def _route(self, request: Any) -> None:
        sender = request.get_response_sender()
        start = time.perf_counter()
        try:
            self.metrics.add("requests")
            await self._serve(request, sender, start)
        except (RequestError, PhaseError) as exc:
            self.metrics.add("errors")
            send_error(sender, str(exc))
        except Exception as exc:  # never leave a stream open
            self.metrics.add("errors")
            send_error(sender, f"router failure: {type(exc).__name__}: {exc}")

    def _inputs(self, request: Any, **overrides: np.ndarray) -> dict[str, np.ndarray]:
        arrays = {}
        for name, is_scalar in self.inputs.items():
            value = overrides.get(name)
            if value is None:
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is None:
                    continue
                value = t.as_numpy()
            arrays[name] = value.reshape(-1, 1) if is_scalar else value
        return arrays

    def _phase(self, model: str, request_type: str, inputs: dict[str, np.ndarray],
               phase_id: str) -> AsyncIterator[PhaseResponse]:
        outputs = _PHASE_OUTPUTS + (
            ["context_phase_params"] if request_type == RequestType.CONTEXT_ONLY else [])
        return self.clients[model].stream(model, inputs, request_id=phase_id,
                                          parameters={REQUEST_TYPE_PARAMETER: request_type},
                                          outputs=outputs, error_output=self.error_output)

    async def _stop(self, model: str, inputs: dict[str, np.ndarray], phase_id: str) -> None:
        """Stop ``phase_id`` on ``model`` (TensorRT-LLM's stop request); never raises."""
        stop = {k: inputs[k] for k in _STOP_INPUTS if k in inputs}
        stop["stop"] = np.array([[True]])
        try:
            async for r in self._phase(model, RequestType.CONTEXT_AND_GENERATION, stop,
                                       phase_id):
                if r.error is not None:
                    log.warning("stop of %s on %s failed: %s", phase_id, model, r.error)
        except Exception:
            log.exception("stop of %s on %s failed", phase_id, model)

    async def _serve(self, request: Any, sender: Any, start: float) -> None:
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        if ids is None or ids.as_numpy().size == 0:
            raise RequestError("the prompt is empty: 'text_input' / 'input_ids' has no tokens")
        n = int(scalar(request, "input_lengths", ids.as_numpy().shape[-1]))
        streaming = bool(scalar(request, "streaming", False))
        exclude_input = bool(scalar(request, "exclude_input_in_output", False))
        prompt = [int(t) for t in ids.as_numpy().reshape(-1)[:n]]
        phase_id = _phase_id(request.request_id())
        no = np.array([[False]])
        yes = np.array([[True]])
        if self.aggregated_model and n < self.aggregated_below:
            self.metrics.add("aggregated")
            inputs = self._inputs(request, streaming=yes, exclude_input_in_output=yes)
            tokens = await self._relay(request, sender, self.aggregated_model, inputs,
                                       RequestType.CONTEXT_AND_GENERATION, phase_id,
                                       streaming, skip=0, start=start)
            self._finish(sender, streaming, tokens, prompt, exclude_input)
            return
        # 1. prefill: one response with the first token(s) and context_phase_params
        inputs = self._inputs(request, streaming=no, exclude_input_in_output=yes)
        first: list[int] = []
        params = None
        error = None
        async for r in self._phase(self.prefill_model, RequestType.CONTEXT_ONLY, inputs,
                                   phase_id):
            if r.error is not None:
                error = r.error
            elif "output_ids" in r.outputs:
                first = [int(t) for t in r.outputs["output_ids"].reshape(-1)]
                params = r.outputs.get("context_phase_params")
                self._queue_metric("prefill_queue_s", r)
        if error is not None:
            raise PhaseError(f"prefill failed: {error}")
        if _cancelled(request):
            self.metrics.add("cancelled")
            await self._stop(self.prefill_model, inputs, phase_id)  # frees the held KV
            _send(sender, flags=FINAL)
            return
        max_new = int(scalar(request, "request_output_len", 1))
        sent_early = False
        if first and streaming and self.early_first_token:
            _send(sender, pb_utils.InferenceResponse(output_tensors=token_outputs(first)))
            self.metrics.add("ttft_s", time.perf_counter() - start)
            sent_early = True
        if not first or params is None or len(first) >= max_new:
            if params is not None:
                await self._stop(self.prefill_model, inputs, phase_id)
            self._finish(sender, streaming, [] if sent_early else first, prompt, exclude_input)
            return
        # 2. decode: pulls the KV, streams the whole output (first token included)
        inputs = self._inputs(request, streaming=yes, exclude_input_in_output=yes)
        inputs["context_phase_params"] = params
        try:
            tokens = await self._relay(request, sender, self.decode_model, inputs,
                                       RequestType.GENERATION_ONLY, phase_id, streaming,
                                       skip=len(first) if sent_early else 0,
                                       start=None if sent_early else start)
        except PhaseError:
            # The decode side may have failed before pulling: free the KV the prefill holds.
            await self._stop(self.prefill_model, inputs, phase_id)
            raise
        self._finish(sender, streaming, tokens, prompt, exclude_input)

    async def _relay(self, request: Any, sender: Any, model: str, inputs: dict[str, np.ndarray],
                     request_type: str, phase_id: str, streaming: bool, *, skip: int,
                     start: float | None) -> list[int]:
        """Forward a phase's stream; returns the tokens not yet sent (non-streaming) or [].

        A cancelled client stops the phase (a ``stop`` request with the same id); the phase
        stream is still drained to its end, so no worker thread or gRPC call is left behind.
        """
        collected: list[int] = []
        seen = 0
        error = None
        stopping = False
        async for r in self._phase(model, request_type, inputs, phase_id):
            if r.error is not None:
                error = r.error
                continue
            if stopping:
                continue
            if _cancelled(request):
                self.metrics.add("cancelled")
                stopping = True
                await self._stop(model, inputs, phase_id)
                continue
            out = r.outputs.get("output_ids")
            if out is None:
                continue
            if seen == 0:
                self._queue_metric("decode_queue_s", r)
            tokens = [int(t) for t in out.reshape(-1)]
            new = tokens[max(0, skip - seen):]
            seen += len(tokens)
            if not new:
                continue
            if streaming:
                if start is not None:
                    self.metrics.add("ttft_s", time.perf_counter() - start)
                    start = None
                _send(sender, pb_utils.InferenceResponse(output_tensors=token_outputs(new)))
            else:
                collected += new
        if error is not None and not stopping:
            raise PhaseError(f"{model} failed: {error}")
        return collected

    def _queue_metric(self, key: str, response: PhaseResponse) -> None:
        arrival = response.outputs.get("arrival_time_ns")
        scheduled = response.outputs.get("first_scheduled_time_ns")
        if arrival is not None and scheduled is not None:
            delta = int(scheduled.reshape(-1)[0]) - int(arrival.reshape(-1)[0])
            if delta >= 0:
                self.metrics.add(key, delta / 1e9)

    @staticmethod
    def _finish(sender: Any, streaming: bool, tokens: list[int], prompt: list[int],
                exclude_input: bool) -> None:
        if streaming:
            if tokens:
                _send(sender, pb_utils.InferenceResponse(output_tensors=token_outputs(tokens)),
                            flags=FINAL)
            else:
                _send(sender, flags=FINAL)
            return
        full = tokens if exclude_input else prompt + tokens
        _send(sender, pb_utils.InferenceResponse(output_tensors=token_outputs(full)), flags=FINAL)


def _client(url: str, local: PhaseClient) -> PhaseClient:
    return GrpcPhaseClient(url) if url else local
