"""What the router does after a phase of one request failed: try the phase again on another
endpoint, fall back to the aggregated path, or end the request with an error.

This is the decision only: :func:`decide` maps the facts of one failure (:class:`Failure`) to
an :class:`Action` -- no Triton, no clock, no I/O. The router
(:mod:`pdtrt.runtime.router.model`) gathers the facts once it has recorded the failure and
probed the endpoint that failed, then carries the action out (and counts and logs it).

The rules, in order:

- **Retry** on another endpoint of the same pool when nothing of the failed attempt reached the
  client, the client has not cancelled, fewer than ``max_attempts`` endpoints of the pool were
  tried, and one not tried yet is healthy. A prefill is retried even when the client has
  cancelled: the router looks for the cancel once a prefill has answered (and then sends no
  decode).
- Else **fall back** to the aggregated path when the failure is on the prefill-then-decode path,
  ``fallback_to_aggregated`` is set, nothing of the failed attempt reached the client, the client
  has not cancelled, and the aggregated pool has a healthy endpoint.
- Else **migrate** when tokens of the failed attempt reached a client still waiting, the request
  has been migrated fewer than ``max_migrations`` times, and the phase's pool has a healthy
  endpoint besides the one that failed -- one that failed an earlier attempt of this request
  counts: a continuation is a new request, routed afresh, and that earlier failure (a KV
  transfer that timed out, a missed probe) says nothing of it. The request goes on from the
  tokens the client has (:mod:`pdtrt.runtime.router.migration`).
- Else **fail**: the request ends with the phase's error.

Once a token of an attempt has reached the client, the attempt is never retried from the
start: a retry could repeat or change it. It is continued instead (migrate), each token the
client has kept as it is. (A retry that answers with another token where the client already
has one is refused by :meth:`pdtrt.runtime.router.reply.Reply.extend`, which raises; not
decided here.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pdtrt.engine_io import Role

__all__ = ["Action", "Failure", "MigrationReason", "decide", "migration_reason"]


class Action(StrEnum):
    RETRY = "retry"  # the same phase again, on another endpoint of its pool
    MIGRATE = "migrate"  # the request goes on from the tokens the client has, elsewhere
    FALL_BACK = "fall back"  # the aggregated path serves the request instead
    FAIL = "fail"  # the request ends with the phase's error


class MigrationReason(StrEnum):
    """Why a request was migrated (the ``reason`` label of ``pdtrt_router_migrations_total``)."""

    DIED = "died"  # the endpoint failed its health probe (its process is gone)
    STALLED = "stalled"  # it sent nothing for the liveness deadline and failed its probe then
    ERROR = "error"  # it answered the call with an error, and its probe still


def migration_reason(*, healthy: bool, stalled: bool) -> MigrationReason:
    """The reason of a migration, from the failed endpoint's health after the failure was
    probed and whether its call ended at the liveness deadline."""
    if stalled:
        return MigrationReason.STALLED
    return MigrationReason.ERROR if healthy else MigrationReason.DIED


@dataclass(frozen=True, kw_only=True)
class Failure:
    """The facts of one failed phase attempt of one request (or of a phase whose pool had no
    endpoint left to call: ``other_healthy`` False)."""

    phase: Role  # PREFILL, DECODE or AGGREGATED
    num_sent: int  # tokens of the failed attempt that reached the client
    cancelled: bool  # the client has cancelled the request
    num_tried: int  # endpoints of the phase's pool tried for this phase, the failed one included
    max_attempts: int  # the most endpoints tried per phase of one request
    other_healthy: bool  # the phase's pool has a healthy endpoint not tried yet
    migration_target: bool  # ... a healthy endpoint besides the failed one, tried or not
    fallback_to_aggregated: bool  # the router's switch
    aggregated_healthy: bool  # the aggregated pool has a healthy endpoint
    migrations_left: int = 0  # how many more times the request may be migrated


def decide(failure: Failure) -> Action:
    """What the router does next; the rules are in the module docstring."""
    f = failure
    untouched = f.num_sent == 0 and not f.cancelled  # nothing reached a client still waiting
    if ((untouched or (f.phase is Role.PREFILL and f.num_sent == 0))
            and f.num_tried < f.max_attempts and f.other_healthy):
        return Action.RETRY
    if (f.phase is not Role.AGGREGATED and f.fallback_to_aggregated and untouched
            and f.aggregated_healthy):
        return Action.FALL_BACK
    if (f.num_sent > 0 and not f.cancelled and f.migrations_left > 0 and f.migration_target):
        return Action.MIGRATE
    return Action.FAIL
