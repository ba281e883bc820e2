"""Migration: a request whose phase died, stalled or failed mid-stream goes on elsewhere.

Once tokens of a decode (or of a local or aggregated call) have reached a streaming client, the
call cannot be retried from the start: a retry could repeat or change them. It is *continued*
instead: the client's prompt followed by every token the client has becomes the prompt of a
new request (:meth:`~pdtrt.runtime.request_parsing.RouterRequest.continued`) for the rest of
``max_tokens``, with the same sampling, stop words and seed, routed afresh by
:func:`pdtrt.runtime.router.paths.serve` (a healthy prefill endpoint then a decode, or a local
prefill where the conditional rule says so); its tokens go to the client's stream from the
position it had reached, so the client sees one stream -- no token repeated, none missing, no
error. Greedy and seeded output equals an uninterrupted run's: the engines count the prompt
and the output alike for penalties and stop words, and the reference engine keys each seeded
draw by its position in the sequence (docs/migration.md says what cannot be kept).

:func:`pdtrt.runtime.router.retry.decide` says when (at most ``max_migrations`` times per
request, while another endpoint of the pool is healthy); this module carries it out, counts it
(``pdtrt_router_migrations_total{phase,reason}``) and marks it on the request's timeline (the
time it added: ``pdtrt_request_migration_seconds``). A migration cannot save a request whose
router dies: the router holds the stream.
"""

from __future__ import annotations

import logging

from pdtrt.runtime.request_parsing import RouterRequest
from pdtrt.runtime.router import paths
from pdtrt.runtime.router.calls import Migrate, PhaseCalls
from pdtrt.runtime.router.reply import Reply
from pdtrt.stop_words import completed_stop_word

__all__ = ["serve"]

log = logging.getLogger(__name__)


async def serve(calls: PhaseCalls, request: RouterRequest, reply: Reply) -> None:
    """Route ``request`` (:func:`pdtrt.runtime.router.paths.serve`), continuing it elsewhere
    each time a phase of it fails mid-stream and may be migrated. Raises the request's
    :class:`~pdtrt.errors.PhaseError` when it cannot be completed."""
    current = request
    try:
        while True:
            try:
                await paths.serve(calls, current, reply)
                return
            except Migrate as migrate:
                reply.rollback()  # what the client has not been sent is generated again
                _count(calls, current, reply, migrate)
                if _ended(request, reply.tokens):
                    reply.finish(request)
                    return
                if current is not request:
                    calls.kv.forget(current)
                current = request.continued(reply.tokens)
    finally:
        if current is not request:
            calls.kv.forget(current)


def _count(calls: PhaseCalls, request: RouterRequest, reply: Reply, migrate: Migrate) -> None:
    reply.timeline.migrated(calls.clock())
    calls.metrics.add("migrations", phase=str(migrate.phase), reason=str(migrate.reason))
    log.warning("request %r: %s; migrating it (%s) with the %d token(s) its client has, "
                "migration %d of at most %d", request.request_id, migrate.message,
                migrate.reason, len(reply.tokens), reply.timeline.migrations,
                calls.config.max_migrations)


def _ended(request: RouterRequest, sent: list[int]) -> bool:
    """The tokens the client has already end the request: ``max_tokens`` of them, the end id
    last, or a stop word they complete (the phase died after its last token, before its
    final response)."""
    if len(sent) >= request.max_new_tokens:
        return True
    end_id = request.inputs.get("end_id")
    if sent and end_id is not None and int(end_id.reshape(-1)[0]) == sent[-1]:
        return True
    return bool(sent) and completed_stop_word(request.prompt, sent,
                                              request.stop_words) is not None
