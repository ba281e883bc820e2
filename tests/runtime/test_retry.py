"""The router's decision after a failed phase: retry, fall back, migrate or fail, row by row."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pdtrt.engine_io import Role
from pdtrt.runtime.router.retry import Action, Failure, MigrationReason, decide, migration_reason

RETRY, FALL_BACK, FAIL, MIGRATE = Action.RETRY, Action.FALL_BACK, Action.FAIL, Action.MIGRATE
PREFILL, DECODE, AGGREGATED = Role.PREFILL, Role.DECODE, Role.AGGREGATED

# A first failure that may be retried: nothing sent, no cancel, 1 of 2 attempts, another
# endpoint healthy; no fallback configured, though the aggregated pool could take it.
FIRST = Failure(phase=DECODE, num_sent=0, cancelled=False, num_tried=1, max_attempts=2,
                other_healthy=True, migration_target=True, fallback_to_aggregated=False,
                aggregated_healthy=True)
SPENT = dict(num_tried=2)  # max_attempts endpoints tried
NONE_LEFT = dict(other_healthy=False, migration_target=False)  # no other healthy endpoint
TRIED = dict(other_healthy=False)  # the other healthy endpoints all failed this request before
FALLBACK = dict(fallback_to_aggregated=True)

ROWS = [
    # prefill: nothing of it ever reached the client
    (dict(phase=PREFILL), RETRY, "prefill-retried"),
    (dict(phase=PREFILL, cancelled=True), RETRY, "prefill-retried-though-cancelled"),
    (dict(phase=PREFILL, **SPENT), FAIL, "prefill-attempts-spent"),
    (dict(phase=PREFILL, **NONE_LEFT), FAIL, "prefill-none-left"),
    (dict(phase=PREFILL, num_tried=0, **NONE_LEFT), FAIL, "prefill-no-endpoint-to-call"),
    (dict(phase=PREFILL, **SPENT, **FALLBACK), FALL_BACK, "prefill-spent-falls-back"),
    (dict(phase=PREFILL, **NONE_LEFT, **FALLBACK), FALL_BACK, "prefill-none-left-falls-back"),
    (dict(phase=PREFILL, num_tried=0, **NONE_LEFT, **FALLBACK), FALL_BACK,
     "prefill-no-endpoint-to-call-falls-back"),
    (dict(phase=PREFILL, cancelled=True, **SPENT, **FALLBACK), FAIL,
     "prefill-cancelled-no-fallback"),
    (dict(phase=PREFILL, aggregated_healthy=False, **SPENT, **FALLBACK), FAIL,
     "prefill-aggregated-pool-down"),
    # decode
    (dict(), RETRY, "decode-retried"),
    (dict(max_attempts=3, num_tried=2), RETRY, "decode-third-attempt"),
    (dict(num_sent=1), FAIL, "decode-tokens-sent"),
    (dict(num_sent=1, **FALLBACK), FAIL, "decode-tokens-sent-no-fallback"),
    (dict(cancelled=True), FAIL, "decode-cancelled"),
    (dict(cancelled=True, **FALLBACK), FAIL, "decode-cancelled-no-fallback"),
    (dict(max_attempts=1), FAIL, "decode-max-attempts-one"),
    (dict(**SPENT), FAIL, "decode-attempts-spent"),
    (dict(**NONE_LEFT), FAIL, "decode-none-left"),
    (dict(**SPENT, **FALLBACK), FALL_BACK, "decode-spent-falls-back"),
    (dict(**NONE_LEFT, **FALLBACK), FALL_BACK, "decode-none-left-falls-back"),
    (dict(num_tried=0, **NONE_LEFT, **FALLBACK), FALL_BACK,
     "decode-no-endpoint-to-call-falls-back"),
    (dict(aggregated_healthy=False, **NONE_LEFT, **FALLBACK), FAIL,
     "decode-aggregated-pool-down"),
    (dict(**FALLBACK), RETRY, "decode-retry-before-fallback"),
    # aggregated: nothing to fall back to
    (dict(phase=AGGREGATED), RETRY, "aggregated-retried"),
    (dict(phase=AGGREGATED, num_sent=3), FAIL, "aggregated-tokens-sent"),
    (dict(phase=AGGREGATED, cancelled=True), FAIL, "aggregated-cancelled"),
    (dict(phase=AGGREGATED, **SPENT, **FALLBACK), FAIL, "aggregated-spent-no-fallback"),
    (dict(phase=AGGREGATED, **NONE_LEFT, **FALLBACK), FAIL, "aggregated-none-left"),
    # migration: tokens reached a client still waiting, a migration left, another endpoint up
    (dict(num_sent=1, migrations_left=2), MIGRATE, "decode-tokens-sent-migrates"),
    (dict(num_sent=1, migrations_left=1, **SPENT), MIGRATE, "decode-migrates-attempts-spent"),
    (dict(num_sent=1, migrations_left=0), FAIL, "decode-migrations-spent"),
    (dict(num_sent=1, migrations_left=2, cancelled=True), FAIL, "decode-cancelled-no-migration"),
    (dict(num_sent=1, migrations_left=2, **NONE_LEFT), FAIL, "decode-none-left-no-migration"),
    (dict(num_sent=1, migrations_left=2, **TRIED), MIGRATE, "decode-migrates-to-one-tried-before"),
    (dict(**TRIED), FAIL, "decode-nothing-sent-not-retried-where-tried"),
    (dict(migrations_left=2), RETRY, "decode-nothing-sent-retried-not-migrated"),
    (dict(phase=AGGREGATED, num_sent=3, migrations_left=1), MIGRATE, "aggregated-migrates"),
]


@pytest.mark.parametrize(("facts", "action"), [row[:2] for row in ROWS],
                         ids=[row[2] for row in ROWS])
def test_the_decision_after_a_failed_phase(facts, action):
    assert decide(dataclasses.replace(FIRST, **facts)) is action


ALL = [Failure(phase=phase, num_sent=sent, cancelled=cancelled, num_tried=tried,
               max_attempts=2, other_healthy=other, migration_target=other or target,
               fallback_to_aggregated=fallback, aggregated_healthy=aggregated)
       for phase, sent, cancelled, tried, other, target, fallback, aggregated
       in itertools.product((PREFILL, DECODE, AGGREGATED), (0, 1), (False, True), (0, 1, 2),
                            (False, True), (False, True), (False, True), (False, True))]


def test_once_a_token_reached_the_client_the_request_fails_without_migrations():
    assert {decide(f) for f in ALL if f.num_sent > 0} == {FAIL}


def test_a_migration_needs_tokens_sent_a_waiting_client_a_migration_and_an_endpoint_left():
    facts = [dataclasses.replace(f, migrations_left=left) for f in ALL for left in (0, 1)]
    migrated = [f for f in facts if decide(f) is MIGRATE]
    assert migrated and all(f.num_sent > 0 and not f.cancelled and f.migrations_left > 0
                            and f.migration_target for f in migrated)
    assert {decide(f) for f in facts if f.num_sent == 0} <= {RETRY, FALL_BACK, FAIL}


@pytest.mark.parametrize(("healthy", "stalled", "reason"), [
    (False, False, MigrationReason.DIED), (False, True, MigrationReason.STALLED),
    (True, False, MigrationReason.ERROR)], ids=["died", "stalled", "error"])
def test_the_reason_of_a_migration(healthy, stalled, reason):
    assert migration_reason(healthy=healthy, stalled=stalled) is reason


def test_only_the_prefill_then_decode_path_falls_back_and_only_when_configured():
    fallen = [f for f in ALL if decide(f) is FALL_BACK]
    assert fallen and all(f.phase is not AGGREGATED and f.fallback_to_aggregated
                          and f.aggregated_healthy and not f.cancelled for f in fallen)


def test_a_retry_needs_an_untried_healthy_endpoint_and_an_attempt_left():
    retried = [f for f in ALL if decide(f) is RETRY]
    assert retried and all(f.other_healthy and f.num_tried < f.max_attempts for f in retried)
