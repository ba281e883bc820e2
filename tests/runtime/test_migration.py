"""Migration against the fake seam: a decode that dies or stalls mid-stream is continued on
another endpoint from the tokens the client has -- one stream, each token once, no error --
bounded by ``max_migrations``, counted and timed.

The fake engines here generate by position in the sequence (the token at position ``p`` is
``100 + p``), as a greedy engine does for a fixed prefix: a continuation whose prompt holds the
output so far generates exactly the rest of the uninterrupted output, and a router that sent a
continuation the wrong prompt or length would show it in the client's tokens.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from pdtrt.engine_io import (
    TOP_LOG_PROBS_INPUT,
    TOP_LOG_PROBS_OUTPUT,
    Param,
    RequestType,
    top_log_prob_outputs,
    top_log_probs_of,
)
from tests.runtime.fake_triton import Fail
from tests.runtime.test_router_failover import DEAD, POOLS, hang, is_probe, metric, work
from tests.runtime.test_router_model import PARAMS, ended_once, request, route, tokens_out

__all__ = ["hang"]  # the fixture, used here

PROMPT_LEN, MAX_NEW = 5, 8
UNINTERRUPTED = [100 + PROMPT_LEN + i for i in range(MAX_NEW)]  # what a fault-free run sends


def _prompt(call) -> list[int]:
    return [int(t) for t in call.inputs["input_ids"].reshape(-1)]


def _max_new(call) -> int:
    return int(call.inputs["request_output_len"].reshape(-1)[0])


def positional(call):
    """An engine that generates token ``100 + p`` at sequence position ``p``: a prefill its
    first token and the KV hand-off, a decode (or a whole request) the whole output."""
    if call.is_stop or is_probe(call):
        return []
    n = len(_prompt(call))
    if call.request_type is RequestType.CONTEXT_ONLY:
        return [tokens_out(100 + n, context_phase_params=PARAMS)]
    return [tokens_out(100 + n + i) for i in range(_max_new(call))]


def dies_after(num_tokens, *, stall=None):
    """A decode endpoint whose process dies after sending ``num_tokens`` of a call (then fails
    its probes); with ``stall`` (an event) it hangs instead of answering with an error."""
    def answer(call):
        if is_probe(call):
            return [Fail(DEAD)]
        if call.is_stop:
            return []
        return _dying(call, num_tokens, stall)
    return answer


def _dying(call, num_tokens, stall):
    yield from positional(call)[:num_tokens]
    if stall is not None:
        stall.wait()
    else:
        yield Fail(DEAD)


def _answers(overrides):
    def answer(call):
        return overrides[call.model](call) if call.model in overrides else positional(call)
    return answer


DECODES = {**POOLS, Param.DECODE_ENDPOINTS: "decode_b,decode"}  # decode_b is chosen first


def test_a_decode_dying_mid_stream_is_continued_on_another_endpoint(router):
    model, triton = router(_answers({"decode_b": dies_after(3)}), **DECODES)
    req = request(PROMPT_LEN, MAX_NEW)
    req.inputs["min_length"] = np.array([6], np.int32)
    route(model, req)
    assert req.tokens == UNINTERRUPTED and ended_once(req)  # each token once, no error
    # the continuation: the client's prompt and the 3 tokens it has, for the other 5 tokens
    sent = [*range(20, 20 + PROMPT_LEN), *UNINTERRUPTED[:3]]
    prefills = work(triton, "prefill") + work(triton, "prefill_b")
    assert [_prompt(c) for c in prefills] == [list(range(20, 25)), sent]
    [continued] = work(triton, "decode")
    assert _prompt(continued) == sent and _max_new(continued) == MAX_NEW - 3
    assert int(continued.inputs["min_length"].reshape(-1)[0]) == 6 - 3  # counts what is out
    assert int(prefills[1].inputs["input_lengths"].reshape(-1)[0]) == len(sent)
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1
    assert triton.metrics["pdtrt_router_retries_total{phase=decode}"] == 0
    assert triton.metrics["pdtrt_router_errors_total"] == 0
    assert triton.metrics["pdtrt_request_migration_seconds_count"] == 1
    assert triton.metrics["pdtrt_request_output_tokens_sum"] == MAX_NEW


def test_the_alternatives_keep_their_positions_across_a_migration(router):
    """With ``num_top_log_probs``, a continuation's alternatives land at the positions of its
    tokens: each output token carries the alternatives of its own sequence position."""
    def with_top(call):
        out = []
        for response in positional(call):
            token = int(response["output_ids"].reshape(-1)[0])
            out.append({**response, "output_log_probs": np.array([[[-0.5]]], np.float32),
                        **top_log_prob_outputs([((token, -0.5), (token + 1000, -3.0))], 2)})
        return out

    def dies(call):
        if is_probe(call):
            return [Fail(DEAD)]
        return [] if call.is_stop else [*with_top(call)[:3], Fail(DEAD)]

    model, triton = router(lambda call: (dies if call.model == "decode_b" else with_top)(call),
                           **DECODES)
    req = request(PROMPT_LEN, MAX_NEW)
    req.inputs["return_log_probs"] = np.array([True])
    req.inputs[TOP_LOG_PROBS_INPUT] = np.array([2], np.int32)
    route(model, req)
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    rows = [row for r in req.responses if TOP_LOG_PROBS_OUTPUT in r.outputs
            for row in top_log_probs_of(r.outputs)]
    assert rows == [((t, -0.5), (t + 1000, -3.0)) for t in UNINTERRUPTED]
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1


@pytest.mark.parametrize(("max_migrations", "num_sent"), [(1, 4), (2, 6)],
                         ids=["one-migration", "two-migrations"])
def test_migrations_are_bounded_then_the_request_ends_with_the_error(router, max_migrations,
                                                                     num_sent):
    every = {f"decode{s}": dies_after(2) for s in ("", "_b", "_c")}  # each dies 2 tokens in
    model, triton = router(_answers(every), **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode,decode_b,decode_c",
        Param.MAX_MIGRATIONS: str(max_migrations)})
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert req.tokens == UNINTERRUPTED[:num_sent]  # a prefix of the right output, nothing more
    # (of the last attempt, the decode's own token reached the client: its first came from
    # the prefill, streamed at once)
    assert ended_once(req, error=f"not retried: 1 token(s) of this attempt had reached the "
                      f"client, and a retry could repeat or change them; migrated "
                      f"{max_migrations} time(s) already")
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode",
                  reason="died") == max_migrations
    assert triton.metrics.get("pdtrt_request_migration_seconds_count", 0) == 0  # not a success


def test_max_migrations_zero_ends_the_request_as_before(router):
    model, triton = router(_answers({"decode_b": dies_after(3)}),
                           **{**DECODES, Param.MAX_MIGRATIONS: "0"})
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert req.tokens == UNINTERRUPTED[:3]
    assert ended_once(req, error="decode failed (endpoint decode_b): ")
    assert work(triton, "decode") == []


def test_a_decode_stalled_mid_stream_is_continued_within_its_liveness_deadline(router, hang):
    model, triton = router(_answers({"decode_b": dies_after(3, stall=hang)}), **DECODES)
    req = request(PROMPT_LEN, MAX_NEW)
    start = time.monotonic()
    asyncio.run(asyncio.wait_for(model.execute([req]), 5.0))  # a hang fails, not blocks
    assert time.monotonic() - start < 3.0
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode",
                  reason="stalled") == 1


def test_a_decode_dying_after_its_last_token_is_not_continued(router):
    """Every token reached the client; only the final response was lost: the router ends the
    stream itself rather than asking an engine for zero more tokens."""
    model, triton = router(_answers({"decode_b": dies_after(MAX_NEW)}), **DECODES)
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    assert len(work(triton, "prefill") + work(triton, "prefill_b")) == 1  # no continuation
    assert work(triton, "decode") == []


def test_a_local_prefill_dying_mid_stream_is_continued(router):
    """Conditional disaggregation: the decode endpoint runs the whole request; it dies
    mid-stream and the continuation is routed afresh."""
    model, triton = router(_answers({"decode_b": dies_after(3)}), **{
        **DECODES, Param.MAX_LOCAL_PREFILL_TOKENS: "64", Param.LOCAL_PREFILL_LIMIT: "64"})
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    [local] = work(triton, "decode_b")
    assert local.request_type is RequestType.CONTEXT_AND_GENERATION
    [continued] = work(triton, "decode")
    assert _prompt(continued)[PROMPT_LEN:] == UNINTERRUPTED[:3]
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1


def test_a_migration_waits_for_its_pool_to_heal_rather_than_fail(router):
    """The other decode endpoint is out (ejected: its process is being reloaded) when decode_b
    dies mid-stream: the request waits, probing it, and goes on there once it answers again
    -- not the error a pool with no healthy endpoint used to give at once."""
    from pdtrt.engine_io import Role
    from pdtrt.runtime.router.pool import eject

    back_at = time.monotonic() + 1.0  # the reload takes a second

    def reloading(call):
        if is_probe(call) and time.monotonic() < back_at:
            return [Fail(DEAD)]
        return positional(call)

    died = []

    def dying(call):  # alive until its stream dies 3 tokens in
        if is_probe(call):
            return [Fail(DEAD)] if died else []
        if call.is_stop:
            return []
        died.append(call)
        return _dying(call, 3, None)

    model, triton = router(_answers({"decode_b": dying, "decode": reloading}),
                           **{**DECODES, Param.PROBE_INTERVAL_S: "0.2"})
    other = next(e for e in model.calls.pools[Role.DECODE].endpoints if e.label == "decode")
    eject(other, DEAD, time.monotonic())
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert time.monotonic() >= back_at
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    [continued] = work(triton, "decode")
    assert _max_new(continued) == MAX_NEW - 3
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1


def test_a_migration_may_go_to_an_endpoint_that_failed_the_request_before(router):
    """decode_b fails the request's first decode before any token (a KV transfer that timed
    out), so the decode is retried on ``decode``, which dies 3 tokens in: decode_b, healthy
    again, takes the migration -- a continuation is a new request, and what failed the first
    attempt says nothing of it (the soak's last failures: "not retried" although the other
    endpoint answered)."""
    first = []

    def fails_once(call):
        if is_probe(call) or call.is_stop:
            return []
        if call.request_type is RequestType.GENERATION_ONLY and not first:
            first.append(call)
            return [Fail("KV transfer failed: KV transfer 1 timed out after 5 s")]
        return positional(call)

    model, triton = router(_answers({"decode_b": fails_once, "decode": dies_after(3)}),
                           **DECODES)
    req = request(PROMPT_LEN, MAX_NEW)
    route(model, req)
    assert req.tokens == UNINTERRUPTED and ended_once(req)
    assert triton.metrics["pdtrt_router_retries_total{phase=decode}"] == 1
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1
    continued = work(triton, "decode_b")[-1]
    assert _prompt(continued)[PROMPT_LEN:] == UNINTERRUPTED[:3]
    assert _max_new(continued) == MAX_NEW - 3
    assert triton.metrics["pdtrt_router_errors_total"] == 0


def _every_fourth(responses):
    """``responses`` (one token each) grouped as an engine with ``stream_interval`` 4 answers:
    the first token alone, then up to every 4th iteration, then the rest (the last)."""
    ids = [int(t) for r in responses for t in r["output_ids"].reshape(-1)]
    extra = {k: v for k, v in responses[0].items() if k not in ("output_ids",
                                                                 "sequence_length")}
    cuts = [k for k in range(1, len(ids) + 1) if k == 1 or k % 4 == 0 or k == len(ids)]
    return [tokens_out(*ids[a:b], **(extra if a == 0 else {}))
            for a, b in zip([0, *cuts], cuts, strict=False)]


def test_a_decode_answering_several_tokens_per_response_is_continued_each_token_once(router):
    """stream_interval 4 on both decode endpoints, 12 tokens: decode_b answers [t0] [t1..t3]
    [t4..t7] and dies; the continuation (prompt + the 8 tokens the client has) answers [t8]
    [t9..t11]. The client gets every token once, in order; the continuation asks for exactly
    the rest."""
    max_new = 12
    whole = [100 + PROMPT_LEN + i for i in range(max_new)]

    def grouped(call):
        if call.is_stop or is_probe(call):
            return []
        return _every_fourth(positional(call))

    def dies_after_three_responses(call):
        if is_probe(call):
            return [Fail(DEAD)]
        if call.is_stop:
            return []
        return [*_every_fourth(positional(call))[:3], Fail(DEAD)]

    model, triton = router(_answers({"decode_b": dies_after_three_responses,
                                     "decode": grouped}), **DECODES)
    req = request(PROMPT_LEN, max_new)
    route(model, req)
    assert req.tokens == whole and ended_once(req)
    [continued] = work(triton, "decode")
    assert _prompt(continued)[PROMPT_LEN:] == whole[:8] and _max_new(continued) == 4
    assert metric(triton, "pdtrt_router_migrations_total", phase="decode", reason="died") == 1
    sizes = [len(r.tokens) for r in req.responses if r.tokens]
    assert sum(sizes) == max_new and max(sizes) > 1  # several tokens in some responses
