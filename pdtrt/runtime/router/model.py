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
:func:`pdtrt.runtime.router.retry.decide`'s; :mod:`~pdtrt.runtime.router.calls` gathers its
facts and carries it out.
Every retry and fallback is counted (``pdtrt_router_retries_total{phase}``,
``pdtrt_router_fallbacks_total``) and logged with the request id.

Request ids and cancellation: each phase attempt sees the client's request id with a unique
suffix (``<id>~<hex>``). When the client cancels (seen by ``is_cancelled``), the router sends
the phase in flight TensorRT-LLM's stop request -- same id, input ``stop`` = true -- which stops
the sequence. Triton 2.51 has no way to cancel a BLS request and does not pass an ensemble
request's cancellation on to the composing model, so the stop request is the mechanism; a client
cancels by streaming to the ``router`` model itself (see docs/design/serve.md). A prefill's KV that
no decode will pull (decode failure, a one-token request, a client gone between the phases, an EOS
as the first token, a first token that completes a stop word) cannot be freed early:
TensorRT-LLM 1.2 ignores an abort of a finished context-only request and frees its KV only when
``kv_transfer_timeout_ms`` runs out, so pdtrt writes a short one per phase (docs/design/serve.md,
"Held KV").

One module per role: :mod:`~pdtrt.runtime.router.paths` (which path),
:mod:`~pdtrt.runtime.router.disaggregated` (prefill, KV hand-off, decode),
:mod:`~pdtrt.runtime.router.aggregated` (the aggregated and local paths),
:mod:`~pdtrt.runtime.router.calls` (one phase call, its endpoint and its failure),
:mod:`~pdtrt.runtime.router.kv_upkeep` (the KV indexes), :mod:`~pdtrt.runtime.router.startup`
(the background probes and polls) and :mod:`~pdtrt.runtime.router.metrics`; this module is
Triton's entry: it reads the config, receives the requests, keeps the ones in flight and
ends each with exactly one final response, and drains.

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
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdtrt.engine_io import ROUTER_IO
from pdtrt.errors import InvalidRequestError, PhaseError
from pdtrt.runtime.faults import FaultInjection
from pdtrt.runtime.request_parsing import RouterRequest, StopRequest, parse_router_request
from pdtrt.runtime.router import migration
from pdtrt.runtime.router.calls import PhaseCalls, make_pools
from pdtrt.runtime.router.config import RouterConfig
from pdtrt.runtime.router.metrics import router_metrics
from pdtrt.runtime.router.reload_losses import read_lost
from pdtrt.runtime.router.reply import Reply
from pdtrt.runtime.router.startup import Background
from pdtrt.runtime.router.timeline import observe
from pdtrt.runtime.router.timing import ttft_phases
from pdtrt.runtime.shutdown import SETTLE_S, SHUTTING_DOWN
from pdtrt.runtime.triton_io import Incoming, Triton, model_params
from pdtrt.tracing_settings import stub_settings

if TYPE_CHECKING:
    from pdtrt.runtime.router.trace import RouterTracing

log = logging.getLogger(__name__)
WEDGE_S = 3600.0  # how long an injected fault blocks the event loop: until the stub is killed


class TritonPythonModel:
    def __init__(self, triton: Triton, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.triton = triton
        self.clock = clock  # seconds: cancel checks, TTFT, probe freshness, ejection times

    def initialize(self, args: dict[str, Any]) -> None:
        self.config = RouterConfig.from_params(model_params(args))
        self.pools = make_pools(self.config)
        self.metrics = router_metrics(self.triton, args["model_name"], self.pools)
        if lost := read_lost(Path(args.get("model_repository", "."))):  # this is a reload
            self.metrics.add("lost", lost)
        self.calls = PhaseCalls(self.triton, self.config, self.pools, self.metrics, self.clock)
        self.prober = self.calls.prober
        self.background = Background(self.calls)
        self._routes: set[asyncio.Task[Any]] = set()  # the requests in flight
        self._replies: dict[str, list[Reply]] = {}  # their replies, by the client's request id
        # tests of a wedged router (PDTRT_FAULT_INJECTION=event_loop:router:<prefix>)
        self.faults = FaultInjection.from_env("router", point="event_loop")
        self.draining = False
        # OpenTelemetry spans per request when the environment names a collector
        # (pdtrt.tracing_settings); None: off, nothing traced or imported
        self.tracing = _tracing(self.clock)
        self.triton.on_server_stop(self.drain)

    async def execute(self, requests: list[Any]) -> None:
        if not self.draining:
            self.background.start()
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
        for task in [*self._routes, *self.background.tasks]:
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its event loop has closed already
                pass

    def finalize(self) -> None:
        self.drain()
        self.metrics.flush()
        if self.tracing is not None:  # the spans of the last requests go out before the stub
            self.tracing.shutdown()
        self.triton.release()  # last: the metrics go while the stub can still delete them

    async def refresh_kv_index(self) -> None:
        """Read every healthy endpoint's KV events into its index (kv_aware routing), or its
        KV capacity (kv_capacity routing)."""
        await self.calls.kv.refresh()

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
        if self.tracing is not None:
            reply.trace = self.tracing.request(incoming.parameters, reply.timeline,
                                               incoming.request_id)
        routed: RouterRequest | None = None
        error: str | None = None
        try:
            if self.draining:
                raise PhaseError(SHUTTING_DOWN)
            request = parse_router_request(incoming)
            assert isinstance(request, RouterRequest)
            routed = request
            reply.counts, reply.num_prompt = request.counts, len(request.prompt)
            await migration.serve(self.calls, request, reply)
            if reply.done and not reply.stopped:
                first_s = reply.timeline.first_token_s
                observe(self.metrics, reply.timeline, end_s=self.clock(),
                        num_in=len(request.prompt), num_out=len(reply.tokens),
                        ttft_phases_s=None if first_s is None else
                        ttft_phases(reply.timeline, first_s))
        except (InvalidRequestError, PhaseError) as exc:
            self.metrics.add("errors")
            error = exc.message
            reply.fail(exc.message)
        except Exception as exc:  # never leave a stream open
            log.exception("router failure")
            self.metrics.add("errors")
            error = f"router failure: {type(exc).__name__}: {exc}"
            reply.fail(error)
        except asyncio.CancelledError:  # drain(): the server is stopping
            self.metrics.add("errors")
            error = SHUTTING_DOWN
            reply.fail(SHUTTING_DOWN)
        finally:
            if reply.trace is not None:
                reply.trace.finish(reply.timeline, num_in=reply.num_prompt,
                                   num_out=len(reply.tokens), error=error,
                                   end_s=reply.ended_s)
            if routed is not None:
                self.calls.kv.forget(routed)
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


def _tracing(clock: Callable[[], float]) -> RouterTracing | None:
    """The router's tracer when its environment names a collector; the tracing modules (and
    OpenTelemetry) load only then."""
    settings = stub_settings()
    if settings is None:
        return None
    from pdtrt.runtime.router.trace import RouterTracing

    return RouterTracing(settings, clock)
