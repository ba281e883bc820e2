"""pdtrt's disaggregated router: a decoupled, asynchronous BLS model (DESIGN §3).

Per request: a context-only request to the prefill model returns the first token and the
``context_phase_params``; the first token goes to the client at once (``early_first_token``);
then a generation-only request to the decode model streams the rest, relayed without repeating
the first token. Many requests are in flight per instance (``async def execute``). The client's
request id is forwarded to both phases, a cancelled client stream cancels the phase request in
flight, prompts shorter than ``aggregated_below_tokens`` go to the aggregated model, every
failure becomes a request error, and every stream ends with a final response.

Prometheus metrics on Triton's metrics port: requests, TTFT, and per-phase queue time
(``first_scheduled_time_ns - arrival_time_ns`` reported by the engines).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from pdtrt.engine_io import REQUEST_TYPE_PARAMETER, ROUTER_IO, Param, RequestType
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
_PHASE_OUTPUTS = ["output_ids", "sequence_length", "arrival_time_ns", "first_scheduled_time_ns"]


class PhaseError(Exception):
    """A phase model answered with an error."""


def _send(sender: Any, *args: Any, **kwargs: Any) -> None:
    with PB_LOCK:
        sender.send(*args, **kwargs)


def _cancelled(request: Any) -> bool:
    with PB_LOCK:
        return bool(request.is_cancelled())


_DONE = object()
# Triton 2.51's BLS response iterator is synchronous: each stream is drained on a worker thread
# so one router instance keeps many requests in flight.
_STREAM_THREADS = 256


async def _responses(phase: Any, pool: ThreadPoolExecutor) -> AsyncIterator[Any]:
    with PB_LOCK:
        it = phase.exec(decoupled=True)
    if hasattr(it, "__aiter__"):
        async for r in it:
            yield r
        return
    loop = asyncio.get_running_loop()
    while True:
        r = await loop.run_in_executor(pool, next, it, _DONE)
        if r is _DONE:
            return
        yield r


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        p = model_params(args)
        self.prefill_model = p[Param.PREFILL_MODEL]
        self.decode_model = p[Param.DECODE_MODEL]
        self.aggregated_model = p.get(Param.AGGREGATED_MODEL, "")
        self.aggregated_below = int(p.get(Param.AGGREGATED_BELOW_TOKENS, "0") or 0)
        self.early_first_token = p.get(Param.EARLY_FIRST_TOKEN, "true") == "true"
        # Scalars arrive reshaped to [batch]; a BLS request must send the config shape [batch, 1].
        self.inputs = {t.name: t.reshape_scalar for t in ROUTER_IO.inputs}
        self.pool = ThreadPoolExecutor(max_workers=_STREAM_THREADS,
                                       thread_name_prefix="pdtrt-router")
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

    def _inputs(self, request: Any, **overrides: np.ndarray) -> list[Any]:
        tensors = []
        for name, is_scalar in self.inputs.items():
            value = overrides.get(name)
            if value is None:
                t = pb_utils.get_input_tensor_by_name(request, name)
                if t is None:
                    continue
                value = t.as_numpy()
            tensors.append(pb_utils.Tensor(name, value.reshape(-1, 1) if is_scalar else value))
        return tensors

    def _phase_request(self, request: Any, model: str, request_type: str, extra: list[Any],
                       **overrides: np.ndarray) -> Any:
        return pb_utils.InferenceRequest(
            model_name=model, inputs=self._inputs(request, **overrides) + extra,
            requested_output_names=_PHASE_OUTPUTS + (
                ["context_phase_params"] if request_type == RequestType.CONTEXT_ONLY else []),
            request_id=request.request_id(), parameters={REQUEST_TYPE_PARAMETER: request_type})

    async def _serve(self, request: Any, sender: Any, start: float) -> None:
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        if ids is None or ids.as_numpy().size == 0:
            raise RequestError("the prompt is empty: 'text_input' / 'input_ids' has no tokens")
        n = int(scalar(request, "input_lengths", ids.as_numpy().shape[-1]))
        streaming = bool(scalar(request, "streaming", False))
        exclude_input = bool(scalar(request, "exclude_input_in_output", False))
        prompt = [int(t) for t in ids.as_numpy().reshape(-1)[:n]]
        no = np.array([[False]])
        yes = np.array([[True]])
        if self.aggregated_model and n < self.aggregated_below:
            self.metrics.add("aggregated")
            phase = self._phase_request(request, self.aggregated_model,
                                        RequestType.CONTEXT_AND_GENERATION, [],
                                        streaming=yes, exclude_input_in_output=yes)
            tokens = await self._relay(request, sender, phase, streaming, skip=0, start=start,
                                       name="aggregated")
            self._finish(sender, streaming, tokens, prompt, exclude_input)
            return
        # 1. prefill: one response with the first token(s) and context_phase_params
        prefill = self._phase_request(request, self.prefill_model, RequestType.CONTEXT_ONLY, [],
                                      streaming=no, exclude_input_in_output=yes)
        first: list[int] = []
        params = None
        async for r in _responses(prefill, self.pool):
            if r.has_error():
                raise PhaseError(f"prefill failed: {r.error().message()}")
            out = pb_utils.get_output_tensor_by_name(r, "output_ids")
            if out is not None:
                first = [int(t) for t in out.as_numpy().reshape(-1)]
                params = pb_utils.get_output_tensor_by_name(r, "context_phase_params")
                self._queue_metric("prefill_queue_s", r)
        if _cancelled(request):
            self.metrics.add("cancelled")
            _send(sender, flags=FINAL)
            return
        max_new = int(scalar(request, "request_output_len", 1))
        sent_early = False
        if first and streaming and self.early_first_token:
            _send(sender, pb_utils.InferenceResponse(output_tensors=token_outputs(first)))
            self.metrics.add("ttft_s", time.perf_counter() - start)
            sent_early = True
        if not first or params is None or len(first) >= max_new:
            self._finish(sender, streaming, [] if sent_early else first, prompt, exclude_input)
            return
        # 2. decode: pulls the KV, streams the whole output (first token included)
        ctx = pb_utils.Tensor("context_phase_params", params.as_numpy())
        decode = self._phase_request(request, self.decode_model, RequestType.GENERATION_ONLY,
                                     [ctx], streaming=yes, exclude_input_in_output=yes)
        tokens = await self._relay(request, sender, decode, streaming,
                                   skip=len(first) if sent_early else 0,
                                   start=None if sent_early else start, name="decode")
        self._finish(sender, streaming, tokens, prompt, exclude_input)

    async def _relay(self, request: Any, sender: Any, phase: Any, streaming: bool, *,
                     skip: int, start: float | None, name: str) -> list[int]:
        """Forward a phase's stream; returns the tokens not yet sent (non-streaming) or []."""
        collected: list[int] = []
        seen = 0
        responses = _responses(phase, self.pool)
        async for r in responses:
            if r.has_error():
                raise PhaseError(f"{name} failed: {r.error().message()}")
            if _cancelled(request):
                self.metrics.add("cancelled")
                await responses.aclose()
                break
            out = pb_utils.get_output_tensor_by_name(r, "output_ids")
            if out is None:
                continue
            if seen == 0:
                self._queue_metric("decode_queue_s", r)
            tokens = [int(t) for t in out.as_numpy().reshape(-1)]
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
        return collected

    def _queue_metric(self, key: str, response: Any) -> None:
        arrival = pb_utils.get_output_tensor_by_name(response, "arrival_time_ns")
        scheduled = pb_utils.get_output_tensor_by_name(response, "first_scheduled_time_ns")
        if arrival is not None and scheduled is not None:
            delta = int(scheduled.as_numpy().reshape(-1)[0]) - int(
                arrival.as_numpy().reshape(-1)[0])
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
