"""pdtrt's disaggregated router: a decoupled, asynchronous BLS model (DESIGN §3).

Per request, one of two paths. **Aggregated**: a prompt shorter than
``aggregated_below_tokens`` goes to the aggregated model, whose stream is relayed. **Prefill
then decode**: a context-only request to the prefill model returns the first token and the
``context_phase_params``; the first token goes to the client at once (``early_first_token``);
then a generation-only request to the decode model streams the rest, relayed without repeating
the first token. Many requests are in flight per instance (``async def execute``). Every
failure becomes a request error, and every stream ends with exactly one final response
(:class:`_Reply` keeps both promises).

Request ids and cancellation: both phases see the client's request id with a unique suffix
(``<id>~<hex>``). When the client cancels (seen by ``is_cancelled``), the router sends the phase
in flight TensorRT-LLM's stop request -- same id, input ``stop`` = true -- which stops the
sequence and, on the prefill side, frees the KV it holds. Triton 2.51 has no way to cancel a
BLS request (no ``cancel()`` on the response iterator) and does not pass an ensemble request's
cancellation on to the composing model in flight, so the stop request is the mechanism; a
client cancels by streaming to the ``router`` model itself (see docs/serve.md). The router also
frees the prefill's KV whenever no decode phase will pull it (decode failure, a one-token
request, a client gone between the phases).

Pools: the prefill and decode models are called in this server (BLS) or, when the router's
``prefill_url`` / ``decode_url`` parameter names another Triton server, over gRPC
(:mod:`pdtrt.runtime.phase_client`); the KV then moves between the two servers' engine
instances over UCX as before. All of Triton goes through the injected seam
(:class:`~pdtrt.runtime.triton_io.Triton`), so this module runs under a fake in unit tests.

Prometheus metrics on Triton's metrics port: requests, errors, cancellations, TTFT, and
per-phase queue time (``first_scheduled_time_ns - arrival_time_ns`` reported by the engines).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdtrt.engine_io import REQUEST_TYPE_PARAMETER, ROUTER_IO, Param, RequestType
from pdtrt.errors import InvalidRequestError, PhaseError
from pdtrt.runtime.phase_client import (
    BlsPhaseClient,
    GrpcPhaseClient,
    PhaseClient,
    PhaseResponse,
)
from pdtrt.runtime.requests import RouterRequest, parse_router_request
from pdtrt.runtime.triton_io import (
    Incoming,
    MetricKind,
    Metrics,
    MetricSpec,
    Triton,
    model_params,
    token_outputs,
)

_COUNTER = MetricKind.COUNTER
_METRICS = {
    "requests": MetricSpec("pdtrt_router_requests_total", "Requests routed", _COUNTER),
    "errors": MetricSpec("pdtrt_router_errors_total", "Requests that ended in an error",
                         _COUNTER),
    "cancelled": MetricSpec("pdtrt_router_cancelled_total", "Requests cancelled by clients",
                            _COUNTER),
    "ttft_s": MetricSpec("pdtrt_router_ttft_seconds_total",
                         "Sum of router-side time to first token, seconds", _COUNTER),
    "aggregated": MetricSpec("pdtrt_router_aggregated_total",
                             "Short requests sent to the aggregated path", _COUNTER),
    "prefill_queue_s": MetricSpec("pdtrt_prefill_queue_seconds_total",
                                  "Sum of prefill queue time, seconds", _COUNTER),
    "decode_queue_s": MetricSpec("pdtrt_decode_queue_seconds_total",
                                 "Sum of decode queue time (after the KV pull), seconds",
                                 _COUNTER),
}
log = logging.getLogger(__name__)
_PHASE_OUTPUTS = ["output_ids", "sequence_length", "arrival_time_ns", "first_scheduled_time_ns"]
# Triton 2.51's BLS response iterator is synchronous: each stream is drained on a worker thread
# so one router instance keeps many requests in flight.
_STREAM_THREADS = 256


def _phase_id(client_id: str) -> str:
    """The id both phases see: the client's, made unique so a ``stop`` hits only this one."""
    return f"{client_id}~{secrets.token_hex(6)}" if client_id else secrets.token_hex(8)


def _tokens(response: PhaseResponse) -> list[int]:
    return [int(t) for t in response.outputs["output_ids"].reshape(-1)]


@dataclass(frozen=True)
class _Prefill:
    """What the prefill phase answered: the first token(s) and the KV hand-off, if any."""

    first_tokens: tuple[int, ...]
    context_phase_params: np.ndarray | None  # None: no KV is held for a decode to pull

    def needs_decode(self, max_new_tokens: int) -> bool:
        return (bool(self.first_tokens) and self.context_phase_params is not None
                and len(self.first_tokens) < max_new_tokens)


class _Reply:
    """The client's side of one routed request.

    Each position of the output goes to the client once -- phases report their tokens by
    position (a decode stream starts again with the prefill's first token), and only positions
    not seen yet are kept -- and exactly one final response ends the request: the rest of the
    output, an empty final, or an error.
    """

    def __init__(self, triton: Triton, incoming: Incoming, metrics: Metrics,
                 start_s: float) -> None:
        self.triton, self.incoming, self.metrics, self.start_s = triton, incoming, metrics, start_s
        self.tokens: list[int] = []  # the output so far, each position once
        self.num_streamed = 0  # of which already sent (streaming)
        self.done = False  # the final response went out

    def cancelled(self) -> bool:
        return self.triton.is_cancelled(self.incoming)

    def extend(self, position: int, tokens: Sequence[int]) -> None:
        """Tokens of the output from ``position`` on; positions already known are dropped."""
        self.tokens += tokens[max(0, len(self.tokens) - position):]

    def stream(self) -> None:
        """Send the tokens not sent yet, if any, as one (non-final) response."""
        new = self.tokens[self.num_streamed:]
        if new:
            self._first_token_out()
            self.triton.send(self.incoming, token_outputs(new))
            self.num_streamed = len(self.tokens)

    def finish(self, request: RouterRequest) -> None:
        """The final response: the unsent rest (streaming) or the whole output."""
        if not request.streaming:
            full = self.tokens if request.exclude_input else [*request.prompt, *self.tokens]
            self.triton.send(self.incoming, token_outputs(full), final=True)
        elif rest := self.tokens[self.num_streamed:]:
            self._first_token_out()
            self.triton.send(self.incoming, token_outputs(rest), final=True)
        else:
            self.triton.close(self.incoming)
        self.done = True

    def close(self) -> None:
        """An empty final response (the client has gone)."""
        self.triton.close(self.incoming)
        self.done = True

    def fail(self, message: str) -> None:
        """End the request with an error, unless it has ended already."""
        if self.done:
            log.warning("request %r already ended; not sent: %s", self.incoming.request_id,
                        message)
            return
        self.done = True
        try:
            self.triton.send_error(self.incoming, message)
        except Exception:  # nothing is left to tell the client with
            log.exception("cannot send the error of request %r: %s", self.incoming.request_id,
                          message)

    def _first_token_out(self) -> None:
        if self.num_streamed == 0:
            self.metrics.add("ttft_s", time.perf_counter() - self.start_s)


class TritonPythonModel:
    def __init__(self, triton: Triton) -> None:
        self.triton = triton

    def initialize(self, args: dict[str, Any]) -> None:
        p = model_params(args)
        self.prefill_model = p[Param.PREFILL_MODEL]
        self.decode_model = p[Param.DECODE_MODEL]
        self.aggregated_model = p.get(Param.AGGREGATED_MODEL, "")
        self.aggregated_below = int(p.get(Param.AGGREGATED_BELOW_TOKENS, "0") or 0)
        self.early_first_token = p.get(Param.EARLY_FIRST_TOKEN, "true") == "true"
        self.error_output = p.get(Param.ERROR_OUTPUT, "")
        self.pool = ThreadPoolExecutor(max_workers=_STREAM_THREADS,
                                       thread_name_prefix="pdtrt-router")
        local = BlsPhaseClient(self.triton, self.pool)
        self.clients: dict[str, PhaseClient] = {
            self.prefill_model: _client(p.get(Param.PREFILL_URL, ""), local),
            self.decode_model: _client(p.get(Param.DECODE_URL, ""), local),
        }
        if self.aggregated_model:
            self.clients[self.aggregated_model] = local
        self.metrics = Metrics(self.triton, _METRICS, {"model": args["model_name"]})

    async def execute(self, requests: list[Any]) -> None:
        received = self.triton.receive(requests, ROUTER_IO.input_names, decoupled=True)
        await asyncio.gather(*(self._route(r) for r in received))
        return None

    def finalize(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- one request -------------------------------------------------------------------------
    async def _route(self, incoming: Incoming) -> None:
        reply = _Reply(self.triton, incoming, self.metrics, time.perf_counter())
        self.metrics.add("requests")
        try:
            request = parse_router_request(incoming)
            phase_id = _phase_id(request.request_id)
            if self._is_short(request):
                await self._aggregated(request, reply, phase_id)
            else:
                await self._disaggregated(request, reply, phase_id)
        except (InvalidRequestError, PhaseError) as exc:
            self.metrics.add("errors")
            reply.fail(exc.message)
        except Exception as exc:  # never leave a stream open
            log.exception("router failure")
            self.metrics.add("errors")
            reply.fail(f"router failure: {type(exc).__name__}: {exc}")

    def _is_short(self, request: RouterRequest) -> bool:
        return bool(self.aggregated_model) and len(request.prompt) < self.aggregated_below

    async def _aggregated(self, request: RouterRequest, reply: _Reply, phase_id: str) -> None:
        """A short prompt: the aggregated model runs both phases; its stream is relayed."""
        self.metrics.add("aggregated")
        await self._relay(self.aggregated_model, RequestType.CONTEXT_AND_GENERATION,
                          request.phase_inputs(streaming=True), phase_id, request, reply)
        reply.finish(request)

    async def _disaggregated(self, request: RouterRequest, reply: _Reply, phase_id: str) -> None:
        """Prefill, the first token at once, then decode -- or no decode at all when the
        prefill's answer is the whole output or the client has gone."""
        prefill = await self._prefill(request, phase_id)
        reply.extend(0, prefill.first_tokens)
        if reply.cancelled():  # the client has gone: no decode, and the KV is freed now
            self.metrics.add("cancelled")
            await self._free_kv(request, phase_id, prefill)
            reply.close()
        else:
            if request.streaming and self.early_first_token:
                reply.stream()
            if prefill.needs_decode(request.max_new_tokens):
                await self._decode(request, reply, phase_id, prefill)
            else:
                await self._free_kv(request, phase_id, prefill)
            reply.finish(request)

    async def _prefill(self, request: RouterRequest, phase_id: str) -> _Prefill:
        """The context-only request: one response with the first token(s) and the
        ``context_phase_params``. Raises :class:`PhaseError` when the prefill fails."""
        first: tuple[int, ...] = ()
        params = None
        error = None
        async for r in self._phase(self.prefill_model, RequestType.CONTEXT_ONLY,
                                   request.phase_inputs(streaming=False), phase_id):
            if r.error is not None:
                error = r.error
            elif "output_ids" in r.outputs:
                first = tuple(_tokens(r))
                params = r.outputs.get("context_phase_params")
                self._queue_metric("prefill_queue_s", r)
        if error is not None:
            raise PhaseError(f"{self.prefill_model} failed: {error}")
        return _Prefill(first, params)

    async def _decode(self, request: RouterRequest, reply: _Reply, phase_id: str,
                      prefill: _Prefill) -> None:
        """The generation-only request: the decode pulls the KV and streams the whole output
        (first token included), relayed. Raises :class:`PhaseError` when the decode fails,
        after freeing the KV the prefill may still hold."""
        assert prefill.context_phase_params is not None
        inputs = request.phase_inputs(streaming=True,
                                      context_phase_params=prefill.context_phase_params)
        try:
            await self._relay(self.decode_model, RequestType.GENERATION_ONLY, inputs, phase_id,
                              request, reply)
        except PhaseError:
            # The decode side may have failed before pulling: free the KV the prefill holds.
            await self._stop(self.prefill_model, request, phase_id)
            raise

    async def _relay(self, model: str, request_type: RequestType,
                     inputs: dict[str, np.ndarray], phase_id: str, request: RouterRequest,
                     reply: _Reply) -> None:
        """Forward a phase's stream into ``reply`` (streamed, or kept for the final response).

        A cancelled client stops the phase (a ``stop`` request with the same id); the phase
        stream is still drained to its end, so no worker thread or gRPC call is left behind.
        Raises :class:`PhaseError` when the phase fails (and was not being stopped).
        """
        seen = 0
        error = None
        stopping = False
        async for r in self._phase(model, request_type, inputs, phase_id):
            if r.error is not None:
                error = r.error
            elif stopping:
                continue
            elif reply.cancelled():
                self.metrics.add("cancelled")
                stopping = True
                await self._stop(model, request, phase_id)
            elif "output_ids" in r.outputs:
                if seen == 0:
                    self._queue_metric("decode_queue_s", r)
                tokens = _tokens(r)
                reply.extend(seen, tokens)
                seen += len(tokens)
                if request.streaming:
                    reply.stream()
        if error is not None and not stopping:
            raise PhaseError(f"{model} failed: {error}")

    # -- phase calls -------------------------------------------------------------------------
    def _phase(self, model: str, request_type: RequestType, inputs: dict[str, np.ndarray],
               phase_id: str) -> AsyncIterator[PhaseResponse]:
        outputs = _PHASE_OUTPUTS + (
            ["context_phase_params"] if request_type is RequestType.CONTEXT_ONLY else [])
        return self.clients[model].stream(model, inputs, request_id=phase_id,
                                          parameters={REQUEST_TYPE_PARAMETER: request_type.value},
                                          outputs=outputs, error_output=self.error_output)

    async def _free_kv(self, request: RouterRequest, phase_id: str, prefill: _Prefill) -> None:
        """No decode will pull the prefill's KV: stop the prefill request so it frees it now,
        not after ``kv_transfer.timeout_s``."""
        if prefill.context_phase_params is not None:
            await self._stop(self.prefill_model, request, phase_id)

    async def _stop(self, model: str, request: RouterRequest, phase_id: str) -> None:
        """Stop ``phase_id`` on ``model`` (TensorRT-LLM's stop request); never raises."""
        try:
            async for r in self._phase(model, RequestType.CONTEXT_AND_GENERATION,
                                       request.stop_inputs(), phase_id):
                if r.error is not None:
                    log.warning("stop of %s on %s failed: %s", phase_id, model, r.error)
        except Exception:
            log.exception("stop of %s on %s failed", phase_id, model)

    def _queue_metric(self, key: str, response: PhaseResponse) -> None:
        arrival = response.outputs.get("arrival_time_ns")
        scheduled = response.outputs.get("first_scheduled_time_ns")
        if arrival is not None and scheduled is not None:
            delta = int(scheduled.reshape(-1)[0]) - int(arrival.reshape(-1)[0])
            if delta >= 0:
                self.metrics.add(key, delta / 1e9)


def _client(url: str, local: PhaseClient) -> PhaseClient:
    return GrpcPhaseClient(url) if url else local
