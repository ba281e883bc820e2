"""Which path a request takes, and taking it.

:func:`choose` asks :func:`pdtrt.prefill_policy.choose_path` where the request's prefill runs,
from what the pools say now (the prefill endpoints' queue depth, the decode endpoint the request
would go to and what its KV index holds): **aggregated** (a short prompt, to the aggregated
model), **local** (a decode endpoint prefills it itself) or **remote** (a prefill endpoint, then
the KV hand-off to a decode endpoint). :func:`serve` counts the choice with its reason and runs
the path (:mod:`~pdtrt.runtime.router.aggregated`, :mod:`~pdtrt.runtime.router.disaggregated`).
"""

from __future__ import annotations

from pdtrt.engine_io import Role
from pdtrt.prefill_policy import PrefillPath, Reason, choose_path
from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router.aggregated import aggregated, prefill_locally
from pdtrt.runtime.router.calls import PhaseCalls
from pdtrt.runtime.router.disaggregated import disaggregated
from pdtrt.runtime.router.reply import Reply

__all__ = ["choose", "serve"]


def choose(calls: PhaseCalls, request: RouterRequest) -> tuple[PrefillPath, Reason]:
    """Where this request's prefill runs (:mod:`~pdtrt.prefill_policy`)."""
    pools = calls.pools
    loads = [e.num_outstanding / e.spec.instances for e in pools[Role.PREFILL].healthy]
    decode = pools[Role.DECODE].pick(cost=calls.kv.cost(request))
    return choose_path(calls.config.prefill_policy, prompt_tokens=len(request.prompt),
                       cached_tokens=calls.kv.cached(request, decode) if decode else 0,
                       has_aggregated=bool(pools[Role.AGGREGATED].endpoints),
                       prefill_queue_depth=min(loads) if loads else None)


async def serve(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """Route ``request`` by the path :func:`choose` picks, counted with its reason."""
    path, reason = choose(calls, request)
    calls.metrics.add("paths", path=str(path), reason=str(reason))
    if reply.timeline.path is None:  # a migration's continuation keeps the first
        reply.timeline.path = path
    if path is PrefillPath.AGGREGATED:
        calls.metrics.add("aggregated")
        await aggregated(calls, request, reply)
    elif path is PrefillPath.LOCAL:
        await prefill_locally(calls, request, reply)
    else:
        await disaggregated(calls, request, reply)
