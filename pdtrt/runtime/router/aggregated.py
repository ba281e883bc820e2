"""The paths where one endpoint runs both phases: the aggregated model, or a decode endpoint
that prefills the request itself (conditional disaggregation, the *local* path).

Either way one ``context_and_generation`` request goes to an endpoint of the pool and its
stream is relayed (:func:`whole`), retried on another endpoint of the pool while the attempt
has sent the client nothing. A local prefill that cannot be completed falls back to the
aggregated path when the router may (``fallback_to_aggregated``).
"""

from __future__ import annotations

from pdtrt.engine_io import RequestType, Role
from pdtrt.errors import PhaseError
from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router.calls import FallBack, PhaseCalls, phase_id
from pdtrt.runtime.router.pool import Endpoint
from pdtrt.runtime.router.reply import Reply

__all__ = ["aggregated", "prefill_locally", "whole"]


async def aggregated(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """The aggregated model runs both phases; its stream is relayed."""
    await whole(calls, Role.AGGREGATED, request, reply)


async def prefill_locally(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """A decode endpoint prefills the request itself and decodes it (conditional
    disaggregation); when that cannot be completed and the router falls back, the
    aggregated path serves it."""
    try:
        await whole(calls, Role.DECODE, request, reply)
        return
    except FallBack:
        pass
    reply.rollback()
    await aggregated(calls, request, reply)


async def whole(calls: PhaseCalls, role: Role, request: RouterRequest, reply: Reply) -> None:
    """One ``context_and_generation`` request to an endpoint of ``role``'s pool, its stream
    relayed. Retried on another endpoint of the pool while this attempt has sent the
    client nothing; raises :class:`~pdtrt.runtime.router.calls.FallBack` or the request's
    error otherwise."""
    tried: list[Endpoint] = []
    while True:
        endpoint = None
        sent = reply.num_streamed
        try:
            endpoint = await calls.choose(role, tried, request)
            reply.timeline.call(calls.clock())
            await calls.relay(endpoint, RequestType.CONTEXT_AND_GENERATION,
                              request.phase_inputs(streaming=True),
                              phase_id(request.request_id), request, reply)
        except PhaseError as exc:
            await calls.after_failure(role, request, reply, exc, endpoint=endpoint,
                                      tried=tried, num_sent=reply.num_streamed - sent)
            reply.rollback()
            continue
        reply.finish(request)
        return
