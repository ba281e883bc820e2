"""pdtrt's disaggregated router: a decoupled, asynchronous BLS model (docs/serve.md).

Per request, one of three paths (:mod:`~pdtrt.prefill_policy` chooses, and
counts the choice with its reason). **Aggregated**: a prompt shorter than
``aggregated_below_tokens`` goes to the aggregated model, whose stream is relayed. **Local**
(conditional disaggregation): a decode endpoint gets the whole request (context and
generation) and prefills it itself. **Prefill then decode**: a context-only request to a
prefill endpoint returns the first token and the ``context_phase_params``; the first token goes
to the client at once (``early_first_token``); then a generation-only request to a decode
endpoint streams the rest, relayed without repeating the first token -- unless the first token
ended the request: the end id, ``max_tokens`` 1, or a stop word it completes (ended here as the
aggregated path ends it; a decode would go past the word). Many requests are in
flight per instance (``async def execute``). Every failure becomes a request error, and every
stream ends with exactly one final response (:class:`~pdtrt.runtime.router.reply.Reply` keeps
both promises).

Pools and failover (points 7-9): each phase has a pool of endpoints -- models of this server
(BLS) or of other Triton servers (gRPC) -- and each call goes to the healthy endpoint with the
least outstanding work (:mod:`pdtrt.runtime.router.pool`). No call waits on a dead phase: after
``liveness_s`` of silence its endpoint is probed, and a failed probe ends the call and ejects
the endpoint; background probes re-admit it (:mod:`pdtrt.runtime.router.health`). A phase that fails
is retried on *another* endpoint of its pool (up to ``max_attempts`` endpoints) while nothing
of that attempt reached the client: a prefill always (nothing was sent yet), a decode before
its first own token (after a fresh prefill; the KV of the failed one is left to the prefill's
``kv_transfer_timeout_ms``), the aggregated
path likewise; with ``fallback_to_aggregated`` a disaggregated path that cannot be completed
goes to the aggregated pool instead. Once tokens of an attempt reached the client, its failure
is a request error that says so -- never a repeated, changed or missing token. That decision is
:func:`pdtrt.runtime.router.retry.decide`'s; this module gathers its facts and carries it out.
Every retry and fallback is counted (``pdtrt_router_retries_total{phase}``,
``pdtrt_router_fallbacks_total``) and logged with the request id.

Request ids and cancellation: each phase attempt sees the client's request id with a unique
suffix (``<id>~<hex>``). When the client cancels (seen by ``is_cancelled``), the router sends
the phase in flight TensorRT-LLM's stop request -- same id, input ``stop`` = true -- which stops
the sequence. Triton 2.51 has no way to cancel a BLS request and does not pass an ensemble
request's cancellation on to the composing model, so the stop request is the mechanism; a client
cancels by streaming to the ``router`` model itself (see docs/serve.md). A prefill's KV that no
decode will pull (decode failure, a one-token request, a client gone between the phases, an EOS
as the first token, a first token that completes a stop word) cannot be freed early:
TensorRT-LLM 1.2 ignores an abort of a finished context-only request and frees its KV only when
``kv_transfer_timeout_ms`` runs out, so pdtrt writes a short one per phase (docs/serve.md,
"Held KV").

All of Triton goes through the injected seam (:class:`~pdtrt.runtime.triton_io.Triton`) and
the time it reads through an injected clock (the liveness deadline and the probe interval are
the event loop's timers), so this module runs under fakes in unit tests. Prometheus metrics on
Triton's metrics port: requests, errors, cancellations, TTFT, per-phase queue time, per
endpoint: calls, health, ejections and re-admissions; and per request that succeeded, histograms
of where its time went (queue, prefill, KV transfer, decode, TTFT, mean inter-token time,
end to end, tokens in and out: :mod:`pdtrt.runtime.router.timeline`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pdtrt.engine_io import PHASE_ROLES, REQUEST_TYPE_PARAMETER, ROUTER_IO, RequestType, Role
from pdtrt.errors import InvalidRequestError, PhaseError
from pdtrt.kv_blocks import block_hashes, reusable_blocks
from pdtrt.prefill_policy import (
    PATH_REASONS,
    PrefillPath,
    Reason,
    choose_path,
)
from pdtrt.runtime.faults import FaultInjection
from pdtrt.runtime.request_parsing import RouterRequest, StopRequest, parse_router_request
from pdtrt.runtime.router.config import RouterConfig
from pdtrt.runtime.router.health import Prober, health_loop, watched
from pdtrt.runtime.router.kv_index import poll
from pdtrt.runtime.router.phase_client import (
    BlsPhaseClient,
    GrpcPhaseClient,
    PhaseClient,
    PhaseResponse,
)
from pdtrt.runtime.router.pool import Endpoint, EndpointPool, Routing, outstanding
from pdtrt.runtime.router.reload_losses import IN_FLIGHT_METRIC, LOST_METRIC, read_lost
from pdtrt.runtime.router.reply import Reply
from pdtrt.runtime.router.retry import Action, Failure, decide
from pdtrt.runtime.router.timeline import HISTOGRAMS, Timeline, observe
from pdtrt.runtime.shutdown import SETTLE_S, SHUTTING_DOWN
from pdtrt.runtime.triton_io import Incoming, MetricKind, Metrics, MetricSpec, Triton, model_params
from pdtrt.stop_words import completed_stop_word

_COUNTER, _GAUGE = MetricKind.COUNTER, MetricKind.GAUGE
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
    # labelled by path and reason (prefill_policy.PATH_REASONS)
    "paths": MetricSpec("pdtrt_router_prefill_path_total",
                        "Requests by where their prefill ran -- aggregated, local (the decode "
                        "endpoint itself) or remote (a prefill endpoint) -- and why", _COUNTER),
    "prefill_queue_s": MetricSpec("pdtrt_prefill_queue_seconds_total",
                                  "Sum of prefill queue time, seconds", _COUNTER),
    "decode_queue_s": MetricSpec("pdtrt_decode_queue_seconds_total",
                                 "Sum of decode queue time (after the KV pull), seconds",
                                 _COUNTER),
    "fallbacks": MetricSpec("pdtrt_router_fallbacks_total",
                            "Requests sent to the aggregated path after the disaggregated one "
                            "failed", _COUNTER),
    "in_flight": MetricSpec(IN_FLIGHT_METRIC, "Requests being routed now", _GAUGE),
    "lost": MetricSpec(LOST_METRIC, "Requests in flight when a process of this router died "
                       "(never ended by Triton; counted by pdtrt serve's supervisor)",
                       _COUNTER),
    # labelled by phase
    "retries": MetricSpec("pdtrt_router_retries_total",
                          "Phase calls retried on another endpoint after a failure", _COUNTER),
    # labelled by phase and endpoint
    "calls": MetricSpec("pdtrt_router_endpoint_calls_total",
                        "Phase calls sent to each endpoint", _COUNTER),
    "healthy": MetricSpec("pdtrt_router_endpoint_healthy",
                          "1 while an endpoint answers its health probes, 0 while ejected",
                          _GAUGE),
    "ejections": MetricSpec("pdtrt_router_endpoint_ejections_total",
                            "Times an endpoint was ejected after a failed health probe",
                            _COUNTER),
    "readmissions": MetricSpec("pdtrt_router_endpoint_readmissions_total",
                               "Times an ejected endpoint was re-admitted", _COUNTER),
    "stalled": MetricSpec("pdtrt_router_stalled_calls_total",
                          "Phase calls ended because their endpoint stopped answering",
                          _COUNTER),
    # KV-aware routing (labelled by phase and endpoint): what each endpoint's KV index holds
    "kv_blocks": MetricSpec("pdtrt_router_kv_index_blocks",
                            "KV blocks an endpoint holds, as its KV events told the router",
                            _GAUGE),
    # labelled by phase: prompt tokens sent to the pool, and those the chosen endpoint's index
    # said it had cached (the engines count what they reused: pdtrt_engine_kv_reused_blocks)
    "kv_prompt_tokens": MetricSpec("pdtrt_router_kv_prompt_tokens_total",
                                   "Prompt tokens of the calls routed by KV", _COUNTER),
    "kv_cached_tokens": MetricSpec("pdtrt_router_kv_cached_tokens_total",
                                   "Prompt tokens the chosen endpoint held, as its KV index "
                                   "said when it was chosen", _COUNTER),
}
# The router's counters reach Triton's metrics endpoint within this many seconds: summed and
# sent together, not one round trip to the server per increment (six per request).
METRICS_FLUSH_S = 0.1
log = logging.getLogger(__name__)
WEDGE_S = 3600.0  # how long an injected fault blocks the event loop: until the stub is killed
_PHASE_OUTPUTS = ["output_ids", "arrival_time_ns", "first_scheduled_time_ns"]  # what it reads


def _phase_id(client_id: str) -> str:
    """The id a phase attempt sees: the client's, made unique so a ``stop`` hits only it."""
    return f"{client_id}~{secrets.token_hex(6)}" if client_id else secrets.token_hex(8)


def _tokens(response: PhaseResponse) -> list[int]:
    return [int(t) for t in response.outputs["output_ids"].reshape(-1)]


def _logprobs(response: PhaseResponse) -> list[float] | None:
    """The response's ``output_log_probs`` (one per token), if it has them."""
    values = response.outputs.get("output_log_probs")
    return None if values is None else [float(v) for v in values.reshape(-1)]


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

    def needs_decode(self, max_new_tokens: int) -> bool:
        return (bool(self.first_tokens) and self.context_phase_params is not None
                and len(self.first_tokens) < max_new_tokens)

    def stop_word(self, request: RouterRequest) -> tuple[int, ...] | None:
        """The stop word of ``request`` that its prompt and first token(s) end with, if any:
        the rule the engines' sampler applies (:mod:`pdtrt.stop_words`). A context phase gives
        one first token, so the tail after it is the only one to look at."""
        return completed_stop_word(request.prompt, self.first_tokens, request.stop_words)


class _FallBack(Exception):
    """The prefill-then-decode path cannot be completed: the aggregated path serves the request
    instead (raised by :meth:`TritonPythonModel._after_failure`)."""


class TritonPythonModel:
    def __init__(self, triton: Triton, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.triton = triton
        self.clock = clock  # seconds: cancel checks, TTFT, probe freshness, ejection times

    def initialize(self, args: dict[str, Any]) -> None:
        self.config = c = RouterConfig.from_params(model_params(args))
        self.pools = {role: EndpointPool(phase=str(role), routing=c.routing, endpoints=[
            Endpoint(spec=spec) for spec in c.pools[role]]) for role in PHASE_ROLES}
        self._role_of = {id(e): role for role, pool in self.pools.items()
                         for e in pool.endpoints}
        local_url = c.local_grpc_url()
        self._local: PhaseClient = (GrpcPhaseClient(local_url) if local_url
                                    else BlsPhaseClient(self.triton))
        self._remote = {spec.url: GrpcPhaseClient(spec.url) for specs in c.pools.values()
                        for spec in specs if spec.url}
        endpoint_labels = [{"phase": str(role), "endpoint": e.label}
                           for role, pool in self.pools.items() for e in pool.endpoints]
        self.metrics = Metrics(self.triton, {**_METRICS, **HISTOGRAMS},
                               {"model": args["model_name"]}, by={
            "retries": [{"phase": str(role)} for role in PHASE_ROLES],
            **{key: [{"phase": str(role)} for role in PHASE_ROLES]
               for key in ("kv_prompt_tokens", "kv_cached_tokens")},
            "paths": [{"path": str(path), "reason": str(reason)}
                      for path, reason in PATH_REASONS],
            **{key: endpoint_labels for key in ("calls", "healthy", "ejections",
                                                "readmissions", "stalled", "kv_blocks")}},
            flush_s=METRICS_FLUSH_S)
        for role, pool in self.pools.items():
            for e in pool.endpoints:
                self.metrics.set("healthy", 1, phase=str(role), endpoint=e.label)
        if lost := read_lost(Path(args.get("model_repository", "."))):  # this is a reload
            self.metrics.add("lost", lost)
        self.prober = Prober(self._client, timeout_s=c.probe_timeout_s,
                             fresh_s=c.liveness_s / 2 if c.liveness_s > 0 else 0.5,
                             error_output=c.error_output, on_change=self._health_changed,
                             clock=self.clock)
        self._health_task: asyncio.Task[None] | None = None
        self._kv_task: asyncio.Task[None] | None = None
        self._kv_problems: dict[int, str] = {}  # id(endpoint) -> the last poll's problem
        self._routes: set[asyncio.Task[Any]] = set()  # the requests in flight
        self._replies: dict[str, list[Reply]] = {}  # their replies, by the client's request id
        self._hashes: dict[int, list[int]] = {}  # id(request) -> its prompt's block hashes
        # tests of a wedged router (PDTRT_FAULT_INJECTION=event_loop:router:<prefix>)
        self.faults = FaultInjection.from_env("router", point="event_loop")
        self.draining = False
        self.triton.on_server_stop(self.drain)

    async def execute(self, requests: list[Any]) -> None:
        self._start_health_checks()
        received = self.triton.receive(requests, ROUTER_IO.input_names, decoupled=True)
        await asyncio.gather(*(self._route(r) for r in received))
        return None

    def drain(self) -> None:
        """The server is stopping (SIGTERM): every request in flight ends now with
        :data:`SHUTTING_DOWN` and new ones are refused -- no retry, no wait for an endpoint.
        Triton 2.51 schedules no more ensemble steps from here on, so a request left to run
        would never reach its client (:mod:`pdtrt.runtime.shutdown`).
        The health probes stop too: a BLS call to a model Triton is unloading never returns.
        """
        self.draining = True
        if self._routes:
            time.sleep(SETTLE_S)  # the tokens already relayed go through their ensemble steps
        background = [t for t in (self._health_task, self._kv_task) if t is not None]
        for task in [*self._routes, *background]:
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its event loop has closed already
                pass

    def finalize(self) -> None:
        self.drain()
        self.metrics.flush()
        self.triton.release()  # last: the metrics go while the stub can still delete them

    # -- endpoints ---------------------------------------------------------------------------
    def _client(self, endpoint: Endpoint) -> PhaseClient:
        return self._remote[endpoint.spec.url] if endpoint.spec.url else self._local

    def _labels(self, endpoint: Endpoint) -> dict[str, str]:
        return {"phase": str(self._role_of[id(endpoint)]), "endpoint": endpoint.label}

    def _health_changed(self, endpoint: Endpoint, healthy: bool) -> None:
        labels = self._labels(endpoint)
        self.metrics.set("healthy", 1 if healthy else 0, **labels)
        self.metrics.add("readmissions" if healthy else "ejections", **labels)

    def _start_health_checks(self) -> None:
        """Background probes of every endpoint, on the event loop the router runs on."""
        if self._health_task is None and self.config.probe_interval_s > 0 and not self.draining:
            endpoints = [e for pool in self.pools.values() for e in pool.endpoints]
            self._health_task = asyncio.get_running_loop().create_task(
                health_loop(self.prober, endpoints, interval_s=self.config.probe_interval_s))
        if (self._kv_task is None or self._kv_task.done()) and not self.draining \
                and self.config.routing is Routing.KV_AWARE:
            self._kv_task = asyncio.get_running_loop().create_task(self._kv_loop())

    # -- the KV index ------------------------------------------------------------------------
    async def _kv_loop(self) -> None:
        """:meth:`refresh_kv_index` every ``kv_events_interval_s``, until cancelled."""
        while True:
            await self.refresh_kv_index()
            await asyncio.sleep(self.config.kv_events_interval_s)

    async def refresh_kv_index(self) -> None:
        """Read every healthy endpoint's KV events into its index
        (:mod:`pdtrt.runtime.router.kv_index`); an ejected endpoint's index stays empty. Only
        kv_aware routing keeps an index."""
        if self.config.routing is not Routing.KV_AWARE:
            return
        await asyncio.gather(*(self._kv_poll(e) for pool in self.pools.values()
                               for e in pool.endpoints if e.healthy and e.kv.publishes),
                             return_exceptions=True)

    async def _kv_poll(self, endpoint: Endpoint) -> None:
        try:
            problem = await asyncio.wait_for(
                poll(self._client(endpoint), endpoint.spec.model, endpoint.kv,
                     error_output=self.config.error_output), self.config.probe_timeout_s)
        except TimeoutError:
            problem = f"no KV-events answer within {self.config.probe_timeout_s:g} s"
        if problem is not None:
            self.prober.failed(endpoint, problem)  # a dead stub is ejected (and its index)
        if problem != self._kv_problems.get(id(endpoint)):  # each new problem logged once
            if not endpoint.kv.publishes:
                log.info("endpoint %s publishes no KV events (block reuse is off there): "
                         "routed without its KV index", endpoint.label)
            elif problem is not None:
                log.warning("KV index of endpoint %s not updated: %s", endpoint.label, problem)
            self._kv_problems[id(endpoint)] = problem or ""
        self.metrics.set("kv_blocks", endpoint.kv.num_blocks, **self._labels(endpoint))

    def _kv_cost(self, request: RouterRequest) -> Callable[[Endpoint], float] | None:
        """The cost of sending ``request`` to an endpoint (kv_aware routing): its net-new prompt
        tokens there, times ``kv_overlap_weight``, plus the tokens the endpoint still owes per
        instance. Dynamo's KV router weighs the same two terms (prefill blocks to compute,
        active blocks); None without KV-aware routing."""
        if self.config.routing is not Routing.KV_AWARE:
            return None
        weight, n = self.config.kv_overlap_weight, len(request.prompt)

        def cost(e: Endpoint) -> float:
            return weight * (n - self._cached(request, e)) + e.outstanding_tokens / e.spec.instances
        return cost

    def _cached(self, request: RouterRequest, endpoint: Endpoint) -> int:
        """Prompt tokens of ``request`` that ``endpoint``'s KV index says it holds."""
        if self.config.routing is not Routing.KV_AWARE:
            return 0
        hashes = self._hashes.get(id(request))
        if hashes is None:
            tpb = self.config.kv_block_tokens
            hashes = self._hashes[id(request)] = block_hashes(
                request.prompt, tpb, reusable_blocks(len(request.prompt), tpb))
        return endpoint.kv.overlap(hashes) * self.config.kv_block_tokens

    async def _choose(self, role: Role, tried: list[Endpoint],
                      request: RouterRequest) -> Endpoint:
        """A healthy endpoint of ``role``'s pool not tried yet, chosen by the pool's routing
        for ``request``. When none is left, the ejected ones are probed first (one may have
        come back since the last background probe); raises :class:`PhaseError` naming every
        endpoint and why it is out when none has."""
        pool = self.pools[role]
        cost = self._kv_cost(request)
        endpoint = pool.choose(tried, cost)
        if endpoint is None and (ejected := [e for e in pool.ejected if e not in tried]):
            await asyncio.gather(*(self.prober.check(e) for e in ejected))
            endpoint = pool.choose(tried, cost)
        if endpoint is None:
            raise PhaseError(f"{role} failed: no healthy {role} endpoint left to try: "
                             f"{pool.describe()}" if pool.endpoints
                             else f"this router has no {role} endpoint")
        if cost is not None:
            self.metrics.add("kv_prompt_tokens", len(request.prompt), phase=str(role))
            self.metrics.add("kv_cached_tokens", self._cached(request, endpoint),
                             phase=str(role))
        return endpoint

    async def _after_failure(self, role: Role, request: RouterRequest, reply: Reply,
                             exc: PhaseError, *, endpoint: Endpoint | None,
                             tried: list[Endpoint], num_sent: int) -> None:
        """A ``role`` call failed with ``exc`` at ``endpoint`` (None: no endpoint was left to
        call), ``num_sent`` tokens of it having reached the client. The endpoint is probed (a
        dead one is ejected); then :func:`~pdtrt.runtime.router.retry.decide` says what comes
        next. Returns when the phase is to be tried on another endpoint; raises
        :class:`_FallBack` when the aggregated path is to serve the request, else the
        request's :class:`PhaseError`. A retry or fallback is counted and logged."""
        if endpoint is not None:
            tried.append(endpoint)
            self.prober.failed(endpoint, exc.message)
            if endpoint.healthy:
                await self.prober.check(endpoint)
        action = decide(Failure(
            phase=role, num_sent=num_sent, cancelled=reply.cancelled(now=True),
            num_tried=len(tried), max_attempts=self.config.max_attempts,
            other_healthy=endpoint is not None and any(  # None: _choose found none left
                e.healthy and e not in tried for e in self.pools[role].endpoints),
            fallback_to_aggregated=self.config.fallback_to_aggregated,
            aggregated_healthy=bool(self.pools[Role.AGGREGATED].healthy)))
        if action is Action.RETRY:
            self.metrics.add("retries", phase=str(role))
            log.warning("request %r: %s; retrying on another %s endpoint", request.request_id,
                        exc.message, role)
            return
        if action is Action.FALL_BACK:
            self.metrics.add("fallbacks")
            log.warning("request %r: %s; falling back to the aggregated path",
                        request.request_id, exc.message)
            raise _FallBack from exc
        raise _after_tokens(exc, num_sent) from None

    # -- one request -------------------------------------------------------------------------
    async def _route(self, incoming: Incoming) -> None:
        reply = Reply(self.triton, incoming, self.metrics, self.clock(), clock=self.clock)
        if self.faults is not None and self.faults.hits(incoming.request_id):
            log.error("request %r: wedging the router's event loop on purpose (%s)",
                      incoming.request_id, "PDTRT_FAULT_INJECTION")
            time.sleep(WEDGE_S)  # blocks the loop: nothing else of this router runs
        if incoming.scalar("stop", False):
            self._stop_route(incoming, reply)
            return
        self.metrics.add("requests")
        task = asyncio.current_task()
        if task is not None:
            self._routes.add(task)
            self.metrics.set("in_flight", len(self._routes))
        self._replies.setdefault(incoming.request_id, []).append(reply)
        routed: RouterRequest | None = None
        try:
            if self.draining:
                raise PhaseError(SHUTTING_DOWN)
            request = parse_router_request(incoming)
            assert isinstance(request, RouterRequest)
            routed = request
            path, reason = self._path(request)
            self.metrics.add("paths", path=str(path), reason=str(reason))
            if path is PrefillPath.AGGREGATED:
                self.metrics.add("aggregated")
                await self._aggregated(request, reply)
            elif path is PrefillPath.LOCAL:
                await self._prefill_locally(request, reply)
            else:
                await self._disaggregated(request, reply)
            if reply.done and not reply.stopped:
                observe(self.metrics, reply.timeline, end_s=self.clock(),
                        num_in=len(request.prompt), num_out=len(reply.tokens))
        except (InvalidRequestError, PhaseError) as exc:
            self.metrics.add("errors")
            reply.fail(exc.message)
        except Exception as exc:  # never leave a stream open
            log.exception("router failure")
            self.metrics.add("errors")
            reply.fail(f"router failure: {type(exc).__name__}: {exc}")
        except asyncio.CancelledError:  # drain(): the server is stopping
            self.metrics.add("errors")
            reply.fail(SHUTTING_DOWN)
        finally:
            if routed is not None:
                self._hashes.pop(id(routed), None)
            self._routes.discard(task)
            self.metrics.set("in_flight", len(self._routes))
            replies = self._replies.get(incoming.request_id, [])
            if reply in replies:
                replies.remove(reply)
            if not replies:
                self._replies.pop(incoming.request_id, None)

    def _stop_route(self, incoming: Incoming, reply: Reply) -> None:
        """TensorRT-LLM's stop request (``stop`` = true, the id of the request to stop): the
        requests in flight with that id stop as if their client had cancelled; the stop itself
        gets an empty final response at once. The supervisor's health probe is such a stop for
        an id nobody uses: its answer comes from this event loop, so a wedged loop is seen."""
        try:
            stop = parse_router_request(incoming)
        except InvalidRequestError as exc:
            reply.fail(exc.message)
            return
        assert isinstance(stop, StopRequest)
        for target in self._replies.get(stop.request_id, ()):
            target.stop()
        reply.close()

    def _path(self, request: RouterRequest) -> tuple[PrefillPath, Reason]:
        """Where this request's prefill runs (:mod:`~pdtrt.prefill_policy`)."""
        loads = [e.num_outstanding / e.spec.instances for e in self.pools[Role.PREFILL].healthy]
        decode = self.pools[Role.DECODE].pick(cost=self._kv_cost(request))
        return choose_path(self.config.prefill_policy, prompt_tokens=len(request.prompt),
                           cached_tokens=self._cached(request, decode) if decode else 0,
                           has_aggregated=bool(self.pools[Role.AGGREGATED].endpoints),
                           prefill_queue_depth=min(loads) if loads else None)

    async def _aggregated(self, request: RouterRequest, reply: Reply) -> None:
        """The aggregated model runs both phases; its stream is relayed."""
        await self._whole(Role.AGGREGATED, request, reply)

    async def _prefill_locally(self, request: RouterRequest, reply: Reply) -> None:
        """A decode endpoint prefills the request itself and decodes it (conditional
        disaggregation); when that cannot be completed and the router falls back, the
        aggregated path serves it."""
        try:
            await self._whole(Role.DECODE, request, reply)
            return
        except _FallBack:
            pass
        reply.rollback()
        await self._aggregated(request, reply)

    async def _whole(self, role: Role, request: RouterRequest, reply: Reply) -> None:
        """One ``context_and_generation`` request to an endpoint of ``role``'s pool, its stream
        relayed. Retried on another endpoint of the pool while this attempt has sent the
        client nothing; raises :class:`_FallBack` or the request's error otherwise."""
        tried: list[Endpoint] = []
        while True:
            endpoint = None
            sent = reply.num_streamed
            try:
                endpoint = await self._choose(role, tried, request)
                reply.timeline.call(self.clock())
                await self._relay(endpoint, RequestType.CONTEXT_AND_GENERATION,
                                  request.phase_inputs(streaming=True),
                                  _phase_id(request.request_id), request, reply)
            except PhaseError as exc:
                await self._after_failure(role, request, reply, exc, endpoint=endpoint,
                                          tried=tried, num_sent=reply.num_streamed - sent)
                reply.rollback()
                continue
            reply.finish(request)
            return

    async def _disaggregated(self, request: RouterRequest, reply: Reply) -> None:
        """Prefill then decode (:meth:`_prefill_then_decode`), or the aggregated path when
        that cannot be completed and the router falls back."""
        try:
            await self._prefill_then_decode(request, reply)
            return
        except _FallBack:
            pass
        reply.rollback()
        await self._aggregated(request, reply)

    async def _prefill_then_decode(self, request: RouterRequest, reply: Reply) -> None:
        """Prefill, the first token at once, then decode -- or no decode at all when the
        prefill's answer is the whole output or the client has gone. A decode that fails
        before its first own token reached the client is tried again on another decode
        endpoint after a fresh prefill. Raises :class:`_FallBack` or the request's error when
        a phase fails and is not retried."""
        tried: list[Endpoint] = []  # decode endpoints that failed this request
        while True:
            prefill = await self._prefill(request, reply)
            reply.extend(0, prefill.first_tokens, prefill.first_logprobs)
            if request.streaming and self.config.early_first_token:
                reply.stream()  # before the cancel check: that is a round trip to the server
            if reply.cancelled(now=True):  # the client has gone: no decode
                self.metrics.add("cancelled")
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
                endpoint = await self._choose(Role.DECODE, tried, request)
                await self._decode(request, reply, prefill, endpoint)
            except PhaseError as exc:
                await self._after_failure(Role.DECODE, request, reply, exc, endpoint=endpoint,
                                          tried=tried, num_sent=reply.num_streamed - sent)
                reply.rollback()
                continue
            reply.finish(request)
            return

    async def _prefill(self, request: RouterRequest, reply: Reply) -> _Prefill:
        """The context-only request: one response with the first token(s) and the
        ``context_phase_params``, from the first prefill endpoint that answers. Raises
        :class:`_FallBack` or the request's error when the prefill fails and is not retried."""
        tried: list[Endpoint] = []
        while True:
            endpoint = None
            try:
                endpoint = await self._choose(Role.PREFILL, tried, request)
                return await self._prefill_once(request, endpoint, reply)
            except PhaseError as exc:
                await self._after_failure(Role.PREFILL, request, reply, exc, endpoint=endpoint,
                                          tried=tried, num_sent=0)

    async def _prefill_once(self, request: RouterRequest, endpoint: Endpoint,
                            reply: Reply) -> _Prefill:
        """One prefill call; a client that cancels while it waits (queued behind a full KV
        pool: a finished prefill's KV stays allocated until pulled or expired, as TensorRT-LLM
        1.2 keeps it) stops it at once rather than at its first response (:meth:`_watch`)."""
        timeline = reply.timeline
        phase_id = _phase_id(request.request_id)
        timeline.prefill_sent_s = self.clock()
        timeline.call(timeline.prefill_sent_s)
        watch = asyncio.get_running_loop().create_task(
            self._watch(reply, endpoint, request, phase_id))
        try:
            return await self._prefill_call(request, endpoint, timeline, phase_id)
        finally:
            watch.cancel()

    async def _watch(self, reply: Reply, endpoint: Endpoint, request: RouterRequest,
                     phase_id: str) -> None:
        """Every :data:`PREFILL_CANCEL_WATCH_S` ask whether the client has gone; if so, stop
        ``phase_id`` at ``endpoint`` (its answer then ends the call)."""
        while True:
            await asyncio.sleep(PREFILL_CANCEL_WATCH_S)
            if reply.cancelled(now=True):
                await self._stop(endpoint, request, phase_id)
                return

    async def _prefill_call(self, request: RouterRequest, endpoint: Endpoint,
                            timeline: Timeline, phase_id: str) -> _Prefill:
        first: tuple[int, ...] = ()
        logprobs = None
        params = None
        error = None
        async with aclosing(self._phase(endpoint, RequestType.CONTEXT_ONLY,
                                        request.phase_inputs(streaming=False), phase_id,
                                        tokens=len(request.prompt) - self._cached(request,
                                                                                  endpoint),
                                        log_probs=request.return_log_probs)) as responses:
            async for r in responses:
                if r.error is not None:
                    error = r.error
                elif "output_ids" in r.outputs:
                    first = tuple(_tokens(r))
                    logprobs = _logprobs(r)
                    params = r.outputs.get("context_phase_params")
                    self._queue_metric("prefill_queue_s", r)
        if error is not None:
            raise PhaseError(_failure(Role.PREFILL, endpoint, error))
        timeline.prefill_done_s = self.clock()
        return _Prefill(first, params, endpoint, phase_id, logprobs)

    async def _decode(self, request: RouterRequest, reply: Reply, prefill: _Prefill,
                      endpoint: Endpoint) -> None:
        """The generation-only request: the decode pulls the KV and streams the whole output
        (first token included), relayed. Raises :class:`PhaseError` when the decode fails."""
        assert prefill.context_phase_params is not None
        inputs = request.phase_inputs(streaming=True,
                                      context_phase_params=prefill.context_phase_params)
        reply.timeline.decode_sent_s = self.clock()
        reply.timeline.decode_first_s = reply.timeline.decode_last_s = None  # a retried one
        await self._relay(endpoint, RequestType.GENERATION_ONLY, inputs, prefill.phase_id,
                          request, reply)

    async def _relay(self, endpoint: Endpoint, request_type: RequestType,
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
        async with aclosing(self._phase(endpoint, request_type, inputs, phase_id,
                                        tokens=request.max_new_tokens,
                                        log_probs=request.return_log_probs)) as responses:
            async for r in responses:
                if r.error is not None:
                    error = r.error
                elif stopping:
                    continue
                elif reply.cancelled():
                    self.metrics.add("cancelled")
                    stopping = True
                    await self._stop(endpoint, request, phase_id)
                elif "output_ids" in r.outputs:
                    if request_type is RequestType.GENERATION_ONLY:
                        reply.timeline.decode_response(self.clock())
                    if seen == 0:
                        self._queue_metric("decode_queue_s", r)
                    tokens = _tokens(r)
                    reply.extend(seen, tokens, _logprobs(r))
                    seen += len(tokens)
                    if request.streaming:
                        reply.stream()
        if error is not None and not stopping:
            if request_type is RequestType.GENERATION_ONLY and seen == 0:
                # a decode that never answered (its KV transfer lost: TensorRT-LLM #12542) still
                # holds the request; a stop frees it (a decode that failed it ignores the stop)
                await self._stop(endpoint, request, phase_id)
            raise PhaseError(_failure(self._role_of[id(endpoint)], endpoint, error))

    # -- phase calls -------------------------------------------------------------------------
    async def _phase(self, endpoint: Endpoint, request_type: RequestType,
                     inputs: dict[str, np.ndarray], phase_id: str, *, tokens: int = 0,
                     is_stop: bool = False, log_probs: bool = False
                     ) -> AsyncIterator[PhaseResponse]:
        """One call's responses, watched by the liveness deadline; counted as outstanding
        work of ``endpoint`` while it runs (``tokens``: what it stands for; ``log_probs``:
        ask for the tokens' log-probabilities too)."""
        outputs = _PHASE_OUTPUTS + (
            ["context_phase_params"] if request_type is RequestType.CONTEXT_ONLY else []) + (
            ["output_log_probs"] if log_probs else [])
        labels = self._labels(endpoint)
        if not is_stop:
            self.metrics.add("calls", **labels)

        started_s = self.prober.clock()

        async def alive() -> str | None:
            problem = await self.prober.check(endpoint)
            if problem is None and endpoint.failed_s > started_s:
                # It answers again, but it failed (its stub died) while this call was in
                # flight: the call is lost -- a BLS stream then never ends, and its exec may
                # never return (docs/serve.md, Triton facts).
                problem = "it failed while this call was in flight, which lost the call"
            if problem is not None:
                self.metrics.add("stalled", **labels)
            return problem

        if self.config.phase_input_names:  # the phase models' names for core inputs
            renames = self.config.phase_input_names
            inputs = {renames.get(name, name): value for name, value in inputs.items()}
        stream = self._client(endpoint).stream(
            endpoint.spec.model, inputs, request_id=phase_id,
            parameters={REQUEST_TYPE_PARAMETER: request_type.value}, outputs=outputs,
            error_output=self.config.error_output)
        with outstanding(endpoint, 0 if is_stop else tokens):
            first_within_s = self.config.kv_transfer_deadline_s \
                if request_type is RequestType.GENERATION_ONLY else 0.0
            async with aclosing(watched(stream, liveness_s=self.config.liveness_s, alive=alive,
                                        what=f"endpoint {endpoint.label}",
                                        first_within_s=first_within_s)) as responses:
                async for r in responses:
                    yield r

    async def _stop(self, endpoint: Endpoint, request: RouterRequest, phase_id: str) -> None:
        """Stop ``phase_id`` at ``endpoint`` (TensorRT-LLM's stop request); never raises. An
        ejected endpoint is not asked (it would not answer; its KV went with it)."""
        if not endpoint.healthy:
            return
        try:
            async with aclosing(self._phase(endpoint, RequestType.CONTEXT_AND_GENERATION,
                                            request.stop_inputs(), phase_id,
                                            is_stop=True)) as responses:
                async for r in responses:
                    if r.error is not None:
                        log.warning("stop of %s at %s failed: %s", phase_id, endpoint.label,
                                    r.error)
        except Exception:
            log.exception("stop of %s at %s failed", phase_id, endpoint.label)

    def _queue_metric(self, key: str, response: PhaseResponse) -> None:
        arrival = response.outputs.get("arrival_time_ns")
        scheduled = response.outputs.get("first_scheduled_time_ns")
        if arrival is not None and scheduled is not None:
            delta = int(scheduled.reshape(-1)[0]) - int(arrival.reshape(-1)[0])
            if delta >= 0:
                self.metrics.add(key, delta / 1e9)


def _failure(role: Role, endpoint: Endpoint, error: str) -> str:
    """``decode failed: <error>``, naming the endpoint when it is not the phase's own model."""
    where = "" if endpoint.label == str(role) else f" (endpoint {endpoint.label})"
    return f"{role} failed{where}: {error}"


def _after_tokens(exc: PhaseError, num_sent: int) -> PhaseError:
    """``exc``, saying why it was not retried when tokens of the attempt reached the client."""
    if num_sent <= 0:
        return exc
    return PhaseError(f"{exc.message}; not retried: {num_sent} token(s) of this attempt had "
                      "reached the client, and a retry could repeat or change them")
