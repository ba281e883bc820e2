"""How the front reaches the deployment: its token-level model over gRPC.

The front tokenizes itself and calls the repository's ``router`` (disaggregated; ``aggregated``
when the repository has no router) with the engine-model I/O -- token ids in, one streamed
response per token out -- over ``grpc.aio`` (:class:`~pdtrt.client.streams.GrpcStreamClient`,
the client the router itself uses for remote pools). Not ``ensemble``: Triton
2.51 does not pass a cancellation on to an ensemble's steps (docs/design/serve.md), so a request
that an HTTP client abandons could not be stopped there.

Cancellation is TensorRT-LLM's stop request (``stop`` = true, same request id), never a gRPC
cancel: Triton up to 2.52 can crash on a stream cancellation racing a response
(triton-inference-server/server #7368, pdtrt.client.client). A request its client abandoned
keeps its stream open and is drained to its final response while the stop is repeated every
:data:`STOP_EVERY_S` -- with several router instances a stop may land on an instance that does
not hold the request, and is then a no-op -- for at most :data:`DRAIN_S`; only a request still
running after that (a server that lost it) has its stream cancelled.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdtrt.client.streams import GrpcStreamClient, StreamResponse
from pdtrt.engine_io import (
    ERROR_OUTPUT,
    TIMING_INPUT,
    TIMING_OUTPUT,
    TOP_LOG_PROB_IDS_OUTPUT,
    TOP_LOG_PROBS_INPUT,
    TOP_LOG_PROBS_OUTPUT,
    TRACEPARENT_PARAMETER,
    ModelName,
    TopLogProbs,
    top_log_probs_of,
)
from pdtrt.errors import ApiError
from pdtrt.front.protocol import OpenAIRequest

__all__ = ["DRAIN_S", "STOP_EVERY_S", "EngineClient", "StreamedTokens", "engine_inputs"]

log = logging.getLogger(__name__)

STOP_EVERY_S = 0.25
DRAIN_S = 30.0


@dataclass(frozen=True)
class StreamedTokens:
    """One streamed response of the engine model: its new tokens and their log-probs, and
    the router's timing of the request (its final response, when asked)."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    top: list[TopLogProbs] | None = None  # each token's alternatives, when asked
    timing: dict[str, Any] | None = None


def engine_inputs(prompt: list[int], request: OpenAIRequest, *, max_tokens: int,
                  end_id: int | None, pad_id: int | None,
                  timing: bool = False) -> dict[str, np.ndarray]:
    """The router's (engine model's) inputs for one streaming request, TensorRT-LLM's names;
    ``timing``: ask the router for the request's timing (only the router has that input)."""
    def scalar(value: object, dtype: type) -> np.ndarray:
        return np.array([[value]], dtype=dtype)

    inputs = {"input_ids": np.array([prompt], dtype=np.int32),
              "input_lengths": scalar(len(prompt), np.int32),
              "request_output_len": scalar(max_tokens, np.int32),
              "end_id": scalar(-1 if request.ignore_eos or end_id is None else end_id, np.int32),
              "streaming": scalar(True, np.bool_),
              "exclude_input_in_output": scalar(True, np.bool_),
              **request.sampling.inputs()}
    if pad_id is not None:
        inputs["pad_id"] = scalar(pad_id, np.int32)
    if timing:
        inputs[TIMING_INPUT] = scalar(True, np.bool_)
    return inputs


def _stop_inputs(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**{k: inputs[k] for k in ("input_ids", "input_lengths", "request_output_len")},
            "stop": np.array([[True]])}


class EngineClient:
    """Streams requests to the deployment's engine model; stops the ones their caller drops."""

    def __init__(self, grpc_url: str, model: str) -> None:
        self.model = model
        self.phase = GrpcStreamClient(grpc_url)
        self.error_output = "" if model == ModelName.ROUTER else ERROR_OUTPUT
        self.has_timing = model == ModelName.ROUTER  # the aggregated model has no timing
        self._drains: set[asyncio.Task] = set()

    async def generate(self, request_id: str, inputs: dict[str, np.ndarray], *,
                       logprobs: bool, traceparent: str | None = None
                       ) -> AsyncIterator[StreamedTokens]:
        """The request's steps; raises :class:`ApiError` (500/503) when the deployment fails
        it. Leaving the iteration early (the HTTP client went, a stop string) stops the request
        on the server and drains it in the background. The stream is read by a task of its own,
        so a caller that is cancelled never cancels the gRPC call. ``traceparent``: the
        front's span, passed on as the request parameter of that name."""
        outputs = ["output_ids"] + (["output_log_probs"] if logprobs else []) + (
            [TOP_LOG_PROBS_OUTPUT, TOP_LOG_PROB_IDS_OUTPUT]
            if logprobs and TOP_LOG_PROBS_INPUT in inputs else []) + (
            [TIMING_OUTPUT] if TIMING_INPUT in inputs else [])
        parameters = {} if traceparent is None else {TRACEPARENT_PARAMETER: traceparent}
        stream = self.phase.stream(self.model, inputs, request_id=request_id,
                                   parameters=parameters, outputs=outputs,
                                   error_output=self.error_output)
        got: asyncio.Queue[StreamResponse | None] = asyncio.Queue()
        pump = asyncio.ensure_future(_pump(stream, got))
        ended = False
        try:
            while (response := await got.get()) is not None:
                if response.error is not None:
                    ended = True
                    raise _engine_error(response.error)
                yield _step(response, logprobs)
            ended = True
        finally:
            if not ended:
                self._keep(self._stop_and_drain(request_id, inputs, pump))

    def _keep(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _stop_and_drain(self, request_id: str, inputs: dict[str, np.ndarray],
                              pump: asyncio.Future) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_S
        while not pump.done() and loop.time() < deadline:
            try:
                await self._stop(request_id, inputs)
            except Exception as exc:  # the server went: the pump ends with it
                log.warning("stop of request %r failed: %s", request_id, exc)
            await asyncio.wait([pump], timeout=STOP_EVERY_S)
        if not pump.done():
            log.warning("request %r still running %.0f s after its stop; cancelling its "
                        "stream", request_id, DRAIN_S)
            pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)

    async def _stop(self, request_id: str, inputs: dict[str, np.ndarray]) -> None:
        async for response in self.phase.stream(self.model, _stop_inputs(inputs),
                                                request_id=request_id, parameters={},
                                                outputs=["output_ids"],
                                                error_output=self.error_output):
            if response.error is not None:
                log.warning("stop of request %r: %s", request_id, response.error)

    async def close(self) -> None:
        """Wait for the requests being stopped (up to their drain deadline)."""
        if self._drains:
            await asyncio.gather(*self._drains, return_exceptions=True)


async def _pump(stream: AsyncIterator[StreamResponse],
                got: asyncio.Queue[StreamResponse | None]) -> None:
    """Read ``stream`` to its end into ``got``; None last."""
    try:
        async for response in stream:
            got.put_nowait(response)
    except Exception as exc:  # a bug below: the request fails, the front goes on
        log.exception("reading a stream of the deployment failed")
        got.put_nowait(StreamResponse(error=f"front failure: {type(exc).__name__}: {exc}"))
    finally:
        got.put_nowait(None)


def _step(response: StreamResponse, logprobs: bool) -> StreamedTokens:
    """A response's tokens (none: the router's final response with the timing alone)."""
    ids_array = response.outputs.get("output_ids")
    ids = [] if ids_array is None else ids_array.reshape(-1).tolist()
    lps = response.outputs.get("output_log_probs") if logprobs else None
    top = top_log_probs_of(response.outputs) if logprobs else None
    timing = response.outputs.get(TIMING_OUTPUT)
    return StreamedTokens(token_ids=[int(t) for t in ids],
                logprobs=None if lps is None else [float(x) for x in lps.reshape(-1)[:len(ids)]],
                top=None if top is None else top[:len(ids)],
                timing=None if timing is None else json.loads(timing.reshape(-1)[0]))


_UNAVAILABLE = ("UNAVAILABLE", "is not healthy", "Connection refused", "failed to connect")


def _engine_error(message: str) -> ApiError:
    if any(m in message for m in _UNAVAILABLE):
        return ApiError(f"the deployment is unavailable: {message}", status=503,
                        type="service_unavailable")
    if "unknown model" in message.lower() or "not found" in message.lower():
        return ApiError(f"the deployment does not serve its engine model: {message}",
                        status=503, type="service_unavailable")
    return ApiError(f"the deployment failed the request: {message}", status=500,
                    type="server_error")
