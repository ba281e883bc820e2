"""One phase call of the router: the endpoint it goes to, its stream, and what a failure means.

:class:`PhaseCalls` holds what every routing path shares -- the pools, the client of each
endpoint (BLS in this server, :class:`~pdtrt.client.streams.GrpcStreamClient` for another
one), the prober, the KV index upkeep and the metrics -- and makes the calls the paths are built
of (:mod:`~pdtrt.runtime.router.disaggregated`, :mod:`~pdtrt.runtime.router.aggregated`):
choosing a healthy endpoint by the pool's routing, streaming a call under the liveness deadline
(counted as the endpoint's outstanding work), relaying a stream into the client's reply,
stopping a phase (TensorRT-LLM's stop request), and, when a call fails, probing its endpoint
and carrying out :func:`pdtrt.runtime.router.retry.decide`'s verdict: retry on another
endpoint, fall back to the aggregated path (:class:`FallBack`), or fail the request.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING

import numpy as np

from pdtrt.client.streams import GrpcStreamClient, StreamClient, StreamResponse
from pdtrt.engine_io import (
    PHASE_ROLES,
    REQUEST_TYPE_PARAMETER,
    TOP_LOG_PROB_IDS_OUTPUT,
    TOP_LOG_PROBS_OUTPUT,
    TRACEPARENT_PARAMETER,
    RequestType,
    Role,
    TopLogProbs,
    top_log_probs_of,
)
from pdtrt.errors import PhaseError
from pdtrt.runtime.metrics import Metrics
from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router.bls_client import BlsPhaseClient
from pdtrt.runtime.router.config import RouterConfig
from pdtrt.runtime.router.health import STOPPED_ANSWERING, Prober, watched
from pdtrt.runtime.router.kv_upkeep import KvUpkeep
from pdtrt.runtime.router.pool import Endpoint, EndpointPool, EndpointState, outstanding
from pdtrt.runtime.router.reply import Reply
from pdtrt.runtime.router.retry import (
    Action,
    Failure,
    MigrationReason,
    decide,
    migration_reason,
)
from pdtrt.runtime.triton_io import Triton

if TYPE_CHECKING:
    from pdtrt.runtime.router.trace import RequestTrace

__all__ = ["FallBack", "Migrate", "PhaseCalls", "failure", "make_pools", "phase_id",
           "log_prob_outputs_of", "response_logprobs", "response_tokens",
           "response_top_log_probs"]

log = logging.getLogger(__name__)

HEAL_WAIT_S = 30.0  # how long a request to migrate waits for its pool to have a healthy endpoint

_PHASE_OUTPUTS = ["output_ids", "arrival_time_ns", "first_scheduled_time_ns"]  # what it reads


class FallBack(Exception):
    """The path cannot be completed: the aggregated path serves the request instead (raised
    by :meth:`PhaseCalls.after_failure`)."""


class Migrate(Exception):
    """A phase failed after tokens of it reached the client: the request is to go on elsewhere
    from the tokens the client has (raised by :meth:`PhaseCalls.after_failure`; carried out by
    :mod:`pdtrt.runtime.router.migration`)."""

    def __init__(self, phase: Role, reason: MigrationReason, message: str) -> None:
        super().__init__(message)
        self.phase, self.reason, self.message = phase, reason, message


def make_pools(config: RouterConfig) -> dict[Role, EndpointPool]:
    """One pool per phase role, of the endpoints ``config`` names."""
    return {role: EndpointPool(phase=str(role), routing=config.routing, endpoints=[
        Endpoint(spec=spec) for spec in config.pools[role]]) for role in PHASE_ROLES}


def phase_id(client_id: str) -> str:
    """The id a phase attempt sees: the client's, made unique so a ``stop`` hits only it."""
    return f"{client_id}~{secrets.token_hex(6)}" if client_id else secrets.token_hex(8)


def response_tokens(response: StreamResponse) -> list[int]:
    return response.outputs["output_ids"].reshape(-1).tolist()  # Python ints


def response_logprobs(response: StreamResponse) -> list[float] | None:
    """The response's ``output_log_probs`` (one per token), if it has them."""
    values = response.outputs.get("output_log_probs")
    return None if values is None else [float(v) for v in values.reshape(-1)]


def response_top_log_probs(response: StreamResponse) -> list[TopLogProbs] | None:
    """The alternatives of each of the response's tokens, if it has them."""
    return top_log_probs_of(response.outputs)


def log_prob_outputs_of(request: RouterRequest) -> list[str]:
    """The log-prob outputs to ask a phase for: what the client asked for."""
    return (["output_log_probs"] if request.return_log_probs else []) + (
        [TOP_LOG_PROBS_OUTPUT, TOP_LOG_PROB_IDS_OUTPUT]
        if request.return_log_probs and request.num_top_log_probs else [])


class PhaseCalls:
    def __init__(self, triton: Triton, config: RouterConfig, pools: dict[Role, EndpointPool],
                 metrics: Metrics, clock: Callable[[], float]) -> None:
        self.config, self.pools, self.metrics, self.clock = config, pools, metrics, clock
        self._role_of = {id(e): role for role, pool in pools.items() for e in pool.endpoints}
        local_url = config.local_grpc_url()
        self._local: StreamClient = (GrpcStreamClient(local_url) if local_url
                                     else BlsPhaseClient(triton))
        self._remote = {spec.url: GrpcStreamClient(spec.url) for specs in config.pools.values()
                        for spec in specs if spec.url}
        self.prober = Prober(self.client, timeout_s=config.probe_timeout_s,
                             fresh_s=config.liveness_s / 2 if config.liveness_s > 0 else 0.5,
                             error_output=config.error_output, on_change=self._health_changed,
                             clock=clock)
        self.kv = KvUpkeep(config, pools, self.prober, self.client, metrics, self.labels)

    def client(self, endpoint: Endpoint) -> StreamClient:
        return self._remote[endpoint.spec.url] if endpoint.spec.url else self._local

    def role_of(self, endpoint: Endpoint) -> Role:
        return self._role_of[id(endpoint)]

    def labels(self, endpoint: Endpoint) -> dict[str, str]:
        return {"phase": str(self.role_of(endpoint)), "endpoint": endpoint.label}

    def _health_changed(self, endpoint: Endpoint, healthy: bool) -> None:
        labels = self.labels(endpoint)
        self.metrics.set("healthy", 1 if healthy else 0, **labels)
        if healthy or endpoint.state is EndpointState.EJECTED:  # a drain is no failure
            self.metrics.add("readmissions" if healthy else "ejections", **labels)

    # -- which endpoint, and after a failure ------------------------------------------------
    async def choose(self, role: Role, tried: list[Endpoint],
                     request: RouterRequest) -> Endpoint:
        """A healthy endpoint of ``role``'s pool not tried yet, chosen by the pool's routing
        for ``request``. When none is left, the ejected ones are probed first (one may have
        come back since the last background probe); raises :class:`PhaseError` naming every
        endpoint and why it is out when none has."""
        pool = self.pools[role]
        cost = self.kv.cost(request)
        endpoint = pool.choose(tried, cost)
        if endpoint is None and (ejected := [e for e in pool.ejected if e not in tried]):
            await asyncio.gather(*(self.prober.check(e) for e in ejected))
            endpoint = pool.choose(tried, cost)
        if endpoint is None:
            raise PhaseError(f"{role} failed: no healthy {role} endpoint left to try: "
                             f"{pool.describe()}" if pool.endpoints
                             else f"this router has no {role} endpoint")
        if self.kv.active:
            self.metrics.add("kv_prompt_tokens", len(request.prompt), phase=str(role))
            self.metrics.add("kv_cached_tokens", self.kv.cached(request, endpoint),
                             phase=str(role))
        return endpoint

    async def after_failure(self, role: Role, request: RouterRequest, reply: Reply,
                            exc: PhaseError, *, endpoint: Endpoint | None,
                            tried: list[Endpoint], num_sent: int) -> None:
        """A ``role`` call failed with ``exc`` at ``endpoint`` (None: no endpoint was left to
        call), ``num_sent`` tokens of it having reached the client. The endpoint is probed (a
        dead one is ejected); then :func:`~pdtrt.runtime.router.retry.decide` says what comes
        next. Returns when the phase is to be tried on another endpoint; raises
        :class:`FallBack` when the aggregated path is to serve the request, else the
        request's :class:`PhaseError`, or :class:`Migrate` when the request is to go on
        elsewhere from the tokens its client has. A retry or fallback is counted and logged
        (a migration where it is carried out)."""
        if endpoint is not None:
            tried.append(endpoint)
            self.prober.failed(endpoint, exc.message)
            if endpoint.healthy:
                await self.prober.check(endpoint)
            if num_sent > 0 and reply.timeline.migrations < self.config.max_migrations:
                await self._heal(role, endpoint, reply)
        action = decide(Failure(
            phase=role, num_sent=num_sent, cancelled=reply.cancelled(now=True),
            num_tried=len(tried), max_attempts=self.config.max_attempts,
            other_healthy=endpoint is not None and any(  # None: choose() found none left
                e.healthy and e not in tried for e in self.pools[role].endpoints),
            migration_target=endpoint is not None and any(
                e.healthy and e is not endpoint for e in self.pools[role].endpoints),
            fallback_to_aggregated=self.config.fallback_to_aggregated,
            aggregated_healthy=bool(self.pools[Role.AGGREGATED].healthy),
            migrations_left=self.config.max_migrations - reply.timeline.migrations))
        if action is Action.RETRY:
            self.metrics.add("retries", phase=str(role))
            log.warning("request %r: %s; retrying on another %s endpoint", request.request_id,
                        exc.message, role)
            return
        if action is Action.FALL_BACK:
            self.metrics.add("fallbacks")
            log.warning("request %r: %s; falling back to the aggregated path",
                        request.request_id, exc.message)
            raise FallBack from exc
        if action is Action.MIGRATE:
            assert endpoint is not None  # other_healthy: an endpoint failed
            raise Migrate(role, migration_reason(healthy=endpoint.healthy,
                                                 stalled=STOPPED_ANSWERING in exc.message),
                          exc.message) from exc
        raise _after_tokens(exc, num_sent, migrations=reply.timeline.migrations) from None

    async def _heal(self, role: Role, failed: Endpoint, reply: Reply) -> None:
        """Before a migration is decided: while no endpoint of ``role``'s pool but the one
        that failed is healthy, wait, probing the others every probe interval, until one
        answers again, the client cancels, or :data:`HEAL_WAIT_S` pass (returns at once when
        one is healthy; a pool of one waits for nothing). The usual case: a pool that lost one
        member while the other, busy with its load, missed a probe, and a reload that takes
        seconds (docs/migration.md)."""
        others = [e for e in self.pools[role].endpoints if e is not failed]
        deadline = self.clock() + HEAL_WAIT_S
        while others and not any(e.healthy for e in others) \
                and not reply.cancelled(now=True) and self.clock() < deadline:
            await asyncio.sleep(max(self.config.probe_interval_s, 0.5))
            await asyncio.gather(*(self.prober.check(e) for e in others if not e.healthy))

    # -- the calls ---------------------------------------------------------------------------
    def stream(self, endpoint: Endpoint, request_type: RequestType,
               inputs: dict[str, np.ndarray], phase_id: str, *, tokens: int = 0,
               kv_tokens: int = 0, is_stop: bool = False, log_probs: Sequence[str] = (),
               trace: RequestTrace | None = None) -> AsyncIterator[StreamResponse]:
        """One call's responses, watched by the liveness deadline; counted as outstanding
        work of ``endpoint`` while it runs (``tokens``: what it stands for; ``kv_tokens``: the
        KV it holds at its end; ``log_probs``: the log-prob outputs to ask for too,
        :func:`log_prob_outputs_of`;
        ``trace``: the request's spans, which get one for this call, its ``traceparent``
        going to the endpoint as a request parameter; None: no layer is added)."""
        parameters = {REQUEST_TYPE_PARAMETER: request_type.value}
        responses = self._stream(endpoint, request_type, inputs, phase_id, parameters,
                                 tokens=tokens, kv_tokens=kv_tokens, is_stop=is_stop,
                                 log_probs=log_probs)
        if trace is None:
            return responses
        return _traced(trace, self.role_of(endpoint), endpoint.label, request_type,
                       parameters, responses)

    async def _stream(self, endpoint: Endpoint, request_type: RequestType,
                      inputs: dict[str, np.ndarray], phase_id: str,
                      parameters: dict[str, str], *, tokens: int, kv_tokens: int,
                      is_stop: bool, log_probs: Sequence[str]) -> AsyncIterator[StreamResponse]:
        outputs = _PHASE_OUTPUTS + (
            ["context_phase_params"] if request_type is RequestType.CONTEXT_ONLY else []) + (
            list(log_probs))
        labels = self.labels(endpoint)
        if not is_stop:
            self.metrics.add("calls", **labels)

        started_s = self.prober.clock()

        async def alive() -> str | None:
            problem = await self.prober.check(endpoint)
            if problem is None and endpoint.failed_s > started_s:
                # It answers again, but it failed (its stub died) while this call was in
                # flight: the call is lost -- a BLS stream then never ends, and its exec may
                # never return (docs/design/serve.md, Triton facts).
                problem = "it failed while this call was in flight, which lost the call"
            if problem is not None:
                self.metrics.add("stalled", **labels)
            return problem

        if self.config.phase_input_names:  # the phase models' names for core inputs
            renames = self.config.phase_input_names
            inputs = {renames.get(name, name): value for name, value in inputs.items()}
        stream = self.client(endpoint).stream(
            endpoint.spec.model, inputs, request_id=phase_id,
            parameters=parameters, outputs=outputs,
            error_output=self.config.error_output)
        with outstanding(endpoint, 0 if is_stop else tokens, 0 if is_stop else kv_tokens):
            first_within_s = self.config.kv_transfer_deadline_s \
                if request_type is RequestType.GENERATION_ONLY else 0.0
            async with aclosing(watched(stream, liveness_s=self.config.liveness_s, alive=alive,
                                        what=f"endpoint {endpoint.label}",
                                        first_within_s=first_within_s)) as responses:
                async for r in responses:
                    if r.error is None:
                        endpoint.answered_s = self.prober.clock()  # alive, if busy (health)
                    yield r

    async def relay(self, endpoint: Endpoint, request_type: RequestType,
                    inputs: dict[str, np.ndarray], phase_id: str, request: RouterRequest,
                    reply: Reply) -> None:
        """Forward a phase's stream into ``reply`` (streamed, or kept for the final response).

        A cancelled client stops the phase (a ``stop`` request with the same id); the phase
        stream is still drained to its end, so no worker thread or gRPC call is left behind.
        Raises :class:`PhaseError` when the phase fails (and was not being stopped).
        """
        seen = 0
        error = None
        stopping = False
        log_probs = request.return_log_probs  # else the phase sends none: nothing to look up
        async with aclosing(self.stream(endpoint, request_type, inputs, phase_id,
                                        tokens=request.max_new_tokens,
                                        kv_tokens=len(request.prompt) + request.max_new_tokens,
                                        log_probs=log_prob_outputs_of(request),
                                        trace=reply.trace)) as responses:
            async for r in responses:
                if r.error is not None:
                    error = r.error
                elif stopping:
                    continue
                elif reply.cancelled():
                    self.metrics.add("cancelled")
                    stopping = True
                    await self.stop(endpoint, request, phase_id)
                elif "output_ids" in r.outputs:
                    if request_type is RequestType.GENERATION_ONLY:
                        reply.timeline.decode_response(self.clock())
                    if seen == 0:
                        queue_s = self.queue_metric("decode_queue_s", r)
                        if request_type is RequestType.GENERATION_ONLY:
                            reply.timeline.decode_queue_s = queue_s
                    tokens = response_tokens(r)
                    if log_probs:
                        reply.extend(request.num_generated + seen, tokens, response_logprobs(r),
                                     response_top_log_probs(r))
                    else:
                        reply.extend(request.num_generated + seen, tokens)
                    seen += len(tokens)
                    if request.streaming:
                        reply.stream()
        if error is not None and not stopping:
            if request_type is RequestType.GENERATION_ONLY and seen == 0:
                # a decode that never answered (its KV transfer lost: TensorRT-LLM #12542) still
                # holds the request; a stop frees it (a decode that failed it ignores the stop)
                await self.stop(endpoint, request, phase_id)
            raise PhaseError(failure(self.role_of(endpoint), endpoint, error))

    async def stop(self, endpoint: Endpoint, request: RouterRequest, phase_id: str) -> None:
        """Stop ``phase_id`` at ``endpoint`` (TensorRT-LLM's stop request); never raises. An
        ejected endpoint is not asked (it would not answer; its KV went with it)."""
        if not endpoint.healthy:
            return
        try:
            async with aclosing(self.stream(endpoint, RequestType.CONTEXT_AND_GENERATION,
                                            request.stop_inputs(), phase_id,
                                            is_stop=True)) as responses:
                async for r in responses:
                    if r.error is not None:
                        log.warning("stop of %s at %s failed: %s", phase_id, endpoint.label,
                                    r.error)
        except Exception:
            log.exception("stop of %s at %s failed", phase_id, endpoint.label)

    def queue_metric(self, key: str, response: StreamResponse) -> float | None:
        """Count the queue time ``response``'s engine reports (its ``arrival_time_ns`` to its
        ``first_scheduled_time_ns``) under ``key``; returns it in seconds, None when the
        response has no such times."""
        arrival = response.outputs.get("arrival_time_ns")
        scheduled = response.outputs.get("first_scheduled_time_ns")
        if arrival is not None and scheduled is not None:
            delta = int(scheduled.reshape(-1)[0]) - int(arrival.reshape(-1)[0])
            if delta >= 0:
                self.metrics.add(key, delta / 1e9)
                return delta / 1e9
        return None


async def _traced(trace: RequestTrace, role: Role, endpoint: str, request_type: RequestType,
                  parameters: dict[str, str], responses: AsyncIterator[StreamResponse]
                  ) -> AsyncIterator[StreamResponse]:
    """``responses`` within the call's span, whose ``traceparent`` joins ``parameters``
    before the call goes out (its first iteration); an error response, or an exception, is
    the span's error."""
    span = trace.call_started(role, endpoint, request_type)
    parameters[TRACEPARENT_PARAMETER] = trace.traceparent(span)
    error = None
    try:
        async with aclosing(responses) as rs:
            async for r in rs:
                if r.error is not None:
                    error = r.error
                yield r
    except GeneratorExit:  # the caller stopped reading: not an error of the call
        raise
    except BaseException as exc:
        error = error or f"{type(exc).__name__}: {exc}"
        raise
    finally:
        trace.call_ended(span, error)


def failure(role: Role, endpoint: Endpoint, error: str) -> str:
    """``decode failed: <error>``, naming the endpoint when it is not the phase's own model."""
    where = "" if endpoint.label == str(role) else f" (endpoint {endpoint.label})"
    return f"{role} failed{where}: {error}"


def _after_tokens(exc: PhaseError, num_sent: int, *, migrations: int) -> PhaseError:
    """``exc``, saying why it was not retried when tokens of the attempt reached the client
    (and how often the request had been migrated, if at all)."""
    if num_sent <= 0:
        return exc
    migrated = f"; migrated {migrations} time(s) already" if migrations else ""
    return PhaseError(f"{exc.message}; not retried: {num_sent} token(s) of this attempt had "
                      f"reached the client, and a retry could repeat or change them{migrated}")
