"""The disaggregated path: a prefill endpoint, the KV hand-off, then a decode endpoint.

A context-only request to a prefill endpoint returns the first token and the
``context_phase_params``; the first token goes to the client at once (``early_first_token``);
then a generation-only request to a decode endpoint pulls the KV and streams the rest, relayed
without repeating the first token -- unless the first token ended the request: the end id,
``max_tokens`` 1, or a stop word it completes (ended here as the aggregated path ends it; a
decode would go past the word). A decode that fails before its first own token reached the
client is tried again on another decode endpoint after a fresh prefill; a client that cancels
while its prefill waits stops the prefill at once (:data:`PREFILL_CANCEL_WATCH_S`). When the
path cannot be completed and the router may fall back, the aggregated path serves the request.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing
from dataclasses import dataclass

import numpy as np

from pdtrt.engine_io import RequestType, Role, TopLogProbs
from pdtrt.errors import PhaseError
from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router.aggregated import aggregated
from pdtrt.runtime.router.calls import (
    FallBack,
    PhaseCalls,
    failure,
    log_prob_outputs_of,
    phase_id,
    response_logprobs,
    response_tokens,
    response_top_log_probs,
)
from pdtrt.runtime.router.pool import Endpoint
from pdtrt.runtime.router.reply import Reply
from pdtrt.stop_words import completed_stop_word

__all__ = ["PREFILL_CANCEL_WATCH_S", "disaggregated"]

log = logging.getLogger(__name__)

# How often a prefill call that has not answered yet asks whether its client has gone (a round
# trip to the server each): a prefill queued behind held KV is stopped within this
PREFILL_CANCEL_WATCH_S = 0.25


@dataclass(frozen=True)
class _Prefill:
    """What a prefill endpoint answered: the first token(s) and the KV hand-off, if any."""

    first_tokens: tuple[int, ...]
    context_phase_params: np.ndarray | None  # None: no KV is held for a decode to pull
    endpoint: Endpoint  # where the KV is held
    phase_id: str  # the id the prefill saw (and the decode sees)
    first_logprobs: list[float] | None = None  # when the client asked for log-probs
    first_top: list[TopLogProbs] | None = None  # and for their alternatives

    def needs_decode(self, max_new_tokens: int) -> bool:
        return (bool(self.first_tokens) and self.context_phase_params is not None
                and len(self.first_tokens) < max_new_tokens)

    def stop_word(self, request: RouterRequest) -> tuple[int, ...] | None:
        """The stop word of ``request`` that its prompt and first token(s) end with, if any:
        the rule the engines' sampler applies (:mod:`pdtrt.stop_words`). A context phase gives
        one first token, so the tail after it is the only one to look at."""
        return completed_stop_word(request.prompt, self.first_tokens, request.stop_words)


async def disaggregated(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """Prefill then decode, or the aggregated path when that cannot be completed and the
    router falls back."""
    try:
        await _prefill_then_decode(calls, request, reply)
        return
    except FallBack:
        pass
    reply.rollback()
    await aggregated(calls, request, reply)


async def _prefill_then_decode(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """Prefill, the first token at once, then decode -- or no decode at all when the
    prefill's answer is the whole output or the client has gone. Raises ``FallBack`` or the
    request's error when a phase fails and is not retried."""
    tried: list[Endpoint] = []  # decode endpoints that failed this request
    while True:
        prefill = await _prefill(calls, request, reply)
        reply.extend(request.num_generated, prefill.first_tokens, prefill.first_logprobs,
                     prefill.first_top)
        if request.streaming and calls.config.early_first_token:
            reply.stream()  # before the cancel check: that is a round trip to the server
        if reply.cancelled(now=True):  # the client has gone: no decode
            calls.metrics.add("cancelled")
            reply.close()
            return
        if not prefill.needs_decode(request.max_new_tokens):
            reply.finish(request)
            return
        if (word := prefill.stop_word(request)) is not None:
            # The prefill ended "length" and holds the KV (TensorRT-LLM checks the length
            # before the stop words), but a decode would not stop at the word: it gets the
            # first token outside its sampler's checks. The aggregated path ends here, so
            # the router does too; the KV goes at the prefill's kv_transfer_timeout_ms.
            log.debug("request %r: the first token completes stop word %s; no decode",
                      request.request_id, list(word))
            reply.finish(request)
            return
        sent = reply.num_streamed
        endpoint = None
        try:
            endpoint = await calls.choose(Role.DECODE, tried, request)
            await _decode(calls, request, reply, prefill, endpoint)
        except PhaseError as exc:
            await calls.after_failure(Role.DECODE, request, reply, exc, endpoint=endpoint,
                                      tried=tried, num_sent=reply.num_streamed - sent)
            reply.rollback()
            continue
        reply.finish(request)
        return


async def _prefill(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> _Prefill:
    """The context-only request: one response with the first token(s) and the
    ``context_phase_params``, from the first prefill endpoint that answers. Raises
    ``FallBack`` or the request's error when the prefill fails and is not retried."""
    tried: list[Endpoint] = []
    while True:
        endpoint = None
        try:
            endpoint = await calls.choose(Role.PREFILL, tried, request)
            return await _prefill_once(calls, request, endpoint, reply)
        except PhaseError as exc:
            await calls.after_failure(Role.PREFILL, request, reply, exc, endpoint=endpoint,
                                      tried=tried, num_sent=0)


async def _prefill_once(calls: PhaseCalls, request: RouterRequest, endpoint: Endpoint,
                        reply: Reply) -> _Prefill:
    """One prefill call; a client that cancels while it waits (queued behind a full KV
    pool: a finished prefill's KV stays allocated until pulled or expired, as TensorRT-LLM
    1.2 keeps it) stops it at once rather than at its first response (:func:`_watch`)."""
    timeline = reply.timeline
    pid = phase_id(request.request_id)
    timeline.prefill_sent_s = calls.clock()
    timeline.call(timeline.prefill_sent_s)
    watch = asyncio.get_running_loop().create_task(_watch(calls, reply, endpoint, request, pid))
    try:
        return await _prefill_call(calls, request, endpoint, reply, pid)
    finally:
        watch.cancel()


async def _watch(calls: PhaseCalls, reply: Reply, endpoint: Endpoint, request: RouterRequest,
                 pid: str) -> None:
    """Every :data:`PREFILL_CANCEL_WATCH_S` ask whether the client has gone; if so, stop
    ``pid`` at ``endpoint`` (its answer then ends the call)."""
    while True:
        await asyncio.sleep(PREFILL_CANCEL_WATCH_S)
        if reply.cancelled(now=True):
            await calls.stop(endpoint, request, pid)
            return


async def _prefill_call(calls: PhaseCalls, request: RouterRequest, endpoint: Endpoint,
                        reply: Reply, pid: str) -> _Prefill:
    first: tuple[int, ...] = ()
    logprobs = top = None
    params = None
    error = None
    uncached = len(request.prompt) - calls.kv.cached(request, endpoint)
    async with aclosing(calls.stream(endpoint, RequestType.CONTEXT_ONLY,
                                     request.phase_inputs(streaming=False), pid,
                                     tokens=uncached,
                                     log_probs=log_prob_outputs_of(request),
                                     trace=reply.trace)) as responses:
        async for r in responses:
            if r.error is not None:
                error = r.error
            elif "output_ids" in r.outputs:
                first = tuple(response_tokens(r))
                logprobs = response_logprobs(r)
                top = response_top_log_probs(r)
                params = r.outputs.get("context_phase_params")
                calls.queue_metric("prefill_queue_s", r)
    if error is not None:
        raise PhaseError(failure(Role.PREFILL, endpoint, error))
    reply.timeline.prefill_done_s = calls.clock()
    return _Prefill(first, params, endpoint, pid, logprobs, top)


async def _decode(calls: PhaseCalls, request: RouterRequest, reply: Reply, prefill: _Prefill,
                  endpoint: Endpoint) -> None:
    """The generation-only request: the decode pulls the KV and streams the whole output
    (first token included), relayed. Raises :class:`PhaseError` when the decode fails."""
    assert prefill.context_phase_params is not None
    inputs = request.phase_inputs(streaming=True,
                                  context_phase_params=prefill.context_phase_params)
    reply.timeline.decode_sent(calls.clock())
    await calls.relay(endpoint, RequestType.GENERATION_ONLY, inputs, prefill.phase_id,
                      request, reply)
