"""The router's pools against the fake seam: endpoint choice, failover before the first token
and never after it, the liveness deadline, ejection and re-admission, the aggregated fallback,
and the metrics that count them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pdtrt.client.streams import PROBE_ID_PREFIX
from pdtrt.engine_io import Param
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import Fail, wait_until
from tests.runtime.test_router_model import (
    OUTPUT,
    PARAMS,
    ended_once,
    request,
    route,
    tokens_out,
)

DEAD = "Stub process 'decode_b_0_0' is not healthy."  # what Triton 2.51 answers for a dead stub
POOLS = {Param.PREFILL_ENDPOINTS: "prefill,prefill_b", Param.DECODE_ENDPOINTS: "decode,decode_b",
         Param.LIVENESS_S: "0.2", Param.PROBE_TIMEOUT_S: "0.5"}


def is_probe(call) -> bool:
    return call.request_id.startswith(PROBE_ID_PREFIX)


def phases(answers=None, *, first=OUTPUT[0]):
    """Engines that answer like pdtrt's, per model; ``answers[model](call)`` replaces the answer
    of that model (probes included, unless it says otherwise)."""
    answers = answers or {}

    def answer(call):
        if call.model in answers:
            return answers[call.model](call)
        if call.is_stop:
            return []
        if call.model.startswith("prefill"):
            return [tokens_out(first, context_phase_params=PARAMS)]
        return [tokens_out(t) for t in OUTPUT]
    return answer


def dead(call):
    return [Fail(DEAD)]


def work(triton, model):
    """The calls ``model`` got that were neither probes nor stops."""
    return [c for c in triton.calls if c.model == model and not c.is_stop]


def metric(triton, name, **labels):
    key = name + "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
    return triton.metrics[key]


def test_load_spreads_over_the_endpoints_of_each_pool(router):
    model, triton = router(phases(), **POOLS)
    route(model, *(request(request_id=f"r{i}") for i in range(8)))
    assert {m: len(work(triton, m)) for m in ("prefill", "prefill_b", "decode", "decode_b")} == {
        "prefill": 4, "prefill_b": 4, "decode": 4, "decode_b": 4}
    assert metric(triton, "pdtrt_router_endpoint_calls_total", phase="decode",
                  endpoint="decode_b") == 4


def test_a_decode_that_fails_before_its_first_token_is_retried_on_another_endpoint(router):
    model, triton = router(phases({"decode_b": dead}), **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode_b,decode"})  # decode_b is chosen first
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)  # each token once, no error
    first, second = work(triton, "prefill") + work(triton, "prefill_b")
    [failed] = work(triton, "decode_b")
    [served] = work(triton, "decode")
    assert failed.request_id == first.request_id and served.request_id == second.request_id
    # TensorRT-LLM 1.2 cannot free a finished prefill's KV early: no stop is sent for it (its
    # kv_transfer_timeout_ms frees it)
    assert not [c for c in triton.calls if c.is_stop]
    assert triton.metrics["pdtrt_router_retries_total{phase=decode}"] == 1
    assert metric(triton, "pdtrt_router_endpoint_ejections_total", phase="decode",
                  endpoint="decode_b") == 1
    assert metric(triton, "pdtrt_router_endpoint_healthy", phase="decode",
                  endpoint="decode_b") == 0
    # ejected: the next request goes to the healthy endpoint at once
    route(model, again := request(request_id="r2"))
    assert again.tokens == OUTPUT and len(work(triton, "decode_b")) == 1


@pytest.mark.parametrize(("streaming", "retried"), [(True, False), (False, True)],
                         ids=["streaming-tokens-sent", "non-streaming-nothing-sent"])
def test_a_decode_failing_after_its_tokens_reached_the_client_is_not_retried(router, streaming,
                                                                           retried):
    """Without migration (``max_migrations`` 0; tests/runtime/test_migration.py has it on)."""
    def fails_after_two(call):
        return [] if call.is_stop else [tokens_out(7), tokens_out(8), Fail("engine failure")]

    model, triton = router(phases({"decode_b": fails_after_two}), **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode_b,decode", Param.MAX_MIGRATIONS: "0"})
    req = request(streaming=streaming)
    route(model, req)
    if retried:  # the client had seen nothing: the whole output comes from the retry
        assert req.tokens == OUTPUT and ended_once(req)
    else:  # the client has 7 and 8: an error, nothing repeated, nothing made up
        assert req.tokens == [7, 8]
        assert ended_once(req, error="decode failed (endpoint decode_b): engine failure; not "
                          "retried: 1 token(s) of this attempt had reached the client")
        assert work(triton, "decode") == []
    assert triton.metrics["pdtrt_router_retries_total{phase=decode}"] == int(retried)


def test_a_failed_prefill_is_retried_on_another_prefill_endpoint(router):
    model, triton = router(phases({"prefill_b": lambda call: [] if call.is_stop
                                   else [Fail("engine failure: boom")]}),
                           **{**POOLS, Param.PREFILL_ENDPOINTS: "prefill_b,prefill"})
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    assert len(work(triton, "prefill_b")) == len(work(triton, "prefill")) == 1
    assert triton.metrics["pdtrt_router_retries_total{phase=prefill}"] == 1
    # it answered its probe: a failed request, not a dead endpoint
    assert metric(triton, "pdtrt_router_endpoint_healthy", phase="prefill",
                  endpoint="prefill_b") == 1


def test_max_attempts_one_means_no_retry(router):
    model, triton = router(phases({"decode_b": dead}), **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode_b,decode", Param.MAX_ATTEMPTS: "1"})
    req = request()
    route(model, req)
    assert ended_once(req, error=f"decode failed (endpoint decode_b): {DEAD}")
    assert work(triton, "decode") == []


@pytest.fixture
def hang():
    """An event that stalled fake phases wait on; set at the end so their threads finish."""
    event = threading.Event()
    yield event
    event.set()


def test_a_phase_that_stops_answering_ends_the_stream_within_its_liveness_deadline(router,
                                                                                  hang):
    def stalls(call):
        if is_probe(call):
            return [Fail(DEAD)]
        if call.is_stop:
            return []
        return stalled(call)

    def stalled(call):
        yield tokens_out(7)
        hang.wait()  # the stub died mid-stream: no response, no end
        yield tokens_out(8)

    model, triton = router(phases({"decode": stalls}), **{
        Param.LIVENESS_S: "0.2", Param.PROBE_TIMEOUT_S: "0.5"})
    req = request()
    start = time.monotonic()
    asyncio.run(asyncio.wait_for(model.execute([req]), 5.0))  # a hang fails, not blocks
    assert time.monotonic() - start < 2.0
    assert req.tokens == [7]
    assert ended_once(req, error=f"decode failed: endpoint decode stopped answering: {DEAD}")
    assert metric(triton, "pdtrt_router_stalled_calls_total", phase="decode",
                  endpoint="decode") == 1
    assert not [c for c in triton.calls if c.is_stop and c.model == "prefill"]  # nothing frees
    # the KV of a finished prefill early on TensorRT-LLM 1.2: its kv_transfer_timeout_ms does


def test_a_call_lost_while_its_endpoint_was_down_ends_though_the_endpoint_is_back(router, hang):
    """The 30-minute soak's hang: a prefill sent as its stub was killed never answers (Triton's
    BLS exec waits for a first response that never comes); the background probe sees the
    endpoint dead, then reloaded. The lost call ends within seconds, with an error that says
    why (one prefill endpoint: there is no other to retry on)."""
    probes, calls = [], []

    def reloaded(call):
        if is_probe(call):
            probes.append(call)
            return [Fail(DEAD)] if len(probes) == 1 else []
        if call.is_stop:
            return []
        calls.append(call)
        return lost()

    def lost():
        hang.wait()
        yield from ()

    model, triton = router(phases({"prefill": reloaded}), **{
        Param.LIVENESS_S: "0.6", Param.PROBE_TIMEOUT_S: "0.5", Param.PROBE_INTERVAL_S: "0.1"})
    req = request()
    asyncio.run(asyncio.wait_for(model.execute([req]), 5.0))  # a hang fails, not blocks
    assert len(probes) >= 2 and len(calls) == 1  # seen dead, then back
    assert ended_once(req, error="prefill failed: endpoint prefill stopped answering: it failed "
                      "while this call was in flight, which lost the call")
    assert metric(triton, "pdtrt_router_stalled_calls_total", phase="prefill",
                  endpoint="prefill") == 1


def test_a_slow_phase_that_answers_its_probe_is_waited_for(router):
    probes = []

    def slow(call):
        if is_probe(call):
            probes.append(call)
        if call.is_stop:
            return []
        return slowly()

    def slowly():
        yield tokens_out(7)
        wait_until(lambda: len(probes) >= 3)  # three liveness deadlines, each probe answered
        yield from (tokens_out(t) for t in OUTPUT[1:])

    model, triton = router(phases({"decode": slow}), **{
        Param.LIVENESS_S: "0.2", Param.PROBE_TIMEOUT_S: "0.5"})
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    assert len(probes) >= 3


def test_a_disaggregated_path_that_cannot_finish_falls_back_to_the_aggregated_one(router):
    model, triton = router(phases({"decode": dead}), aggregated_model="aggregated",
                           fallback_to_aggregated="true")
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)
    assert len(work(triton, "aggregated")) == 1
    assert triton.metrics["pdtrt_router_fallbacks_total"] == 1
    # without the switch, the same failure is the client's error
    model, triton = router(phases({"decode": dead}), aggregated_model="aggregated")
    route(model, req := request())
    assert ended_once(req, error=DEAD) and work(triton, "aggregated") == []


def test_a_retry_may_not_change_a_token_the_client_already_has(router):
    firsts = iter([7, 99])  # the re-prefill samples another first token

    def prefill(call):
        return [] if call.is_stop else [tokens_out(next(firsts), context_phase_params=PARAMS)]

    model, triton = router(phases({"prefill": prefill, "decode_b": dead}), **{
        **POOLS, Param.PREFILL_ENDPOINTS: "prefill", Param.DECODE_ENDPOINTS: "decode_b,decode"})
    req = request()
    route(model, req)
    assert req.tokens == [7]  # sent at once (early first token), never changed
    assert ended_once(req, error="a retried phase gave token 99 at position 0, where the "
                      "output already has 7")


def test_an_ejected_endpoint_comes_back_when_it_answers_again(router):
    down = {"now": True}

    def decode(call):
        if down["now"]:
            return [Fail(DEAD)]
        return [] if call.is_stop else [tokens_out(t) for t in OUTPUT]

    clock = FakeClock()
    model, triton = router(phases({"decode": decode}), clock=clock,
                           **{Param.LIVENESS_S: "0.2"})
    route(model, first := request(request_id="r1"))
    assert ended_once(first, error=DEAD)
    route(model, second := request(request_id="r2"))  # still down: probed, still out
    assert ended_once(second, error="no healthy decode endpoint left to try: decode (ejected: ")
    down["now"] = False  # reloaded by the supervisor
    clock.advance(0.15)  # a probe result is reused for half the liveness deadline
    route(model, third := request(request_id="r3"))
    assert third.tokens == OUTPUT and ended_once(third)
    assert metric(triton, "pdtrt_router_endpoint_readmissions_total", phase="decode",
                  endpoint="decode") == 1
    assert metric(triton, "pdtrt_router_endpoint_healthy", phase="decode",
                  endpoint="decode") == 1


def test_background_probes_eject_a_dead_endpoint_before_a_request_reaches_it(router):
    model, triton = router(phases({"decode_b": dead}), **{**POOLS, Param.PROBE_INTERVAL_S: "0.05"})

    async def run():
        ejected = asyncio.Event()
        on_change = model.prober.on_change
        model.prober.on_change = lambda endpoint, healthy: (on_change(endpoint, healthy),
                                                            ejected.set())
        await model.execute([])  # the health checks start with the first execute
        await asyncio.wait_for(ejected.wait(), 5.0)  # a background probe ejected decode_b
        await model.execute([req := request()])
        return req

    req = asyncio.run(run())
    assert req.tokens == OUTPUT and ended_once(req)
    assert work(triton, "decode_b") == []  # only its probes reached it
    assert metric(triton, "pdtrt_router_endpoint_ejections_total", phase="decode",
                  endpoint="decode_b") == 1


def test_a_decode_that_answers_probes_but_never_its_call_ends_at_the_transfer_deadline(router,
                                                                                     hang):
    """TensorRT-LLM #12542: a block evicted from the reuse tree before its send leaves the
    generation side waiting forever on the KV, while the endpoint stays healthy. The router's
    kv_transfer_deadline_s bounds the wait for the first response, then stops the request at
    the decode (it still holds it) and fails it -- retried on another decode when there is
    one."""
    def waits_for_kv(call):
        if is_probe(call) or call.is_stop:
            return []  # alive, and a stop is taken
        return stuck()

    def stuck():
        hang.wait()  # the transfer that never ends
        yield tokens_out(9)

    model, triton = router(phases({"decode": waits_for_kv}), **{
        Param.LIVENESS_S: "0.2", Param.PROBE_TIMEOUT_S: "0.5",
        Param.KV_TRANSFER_DEADLINE_S: "0.6"})
    req = request()
    start = time.monotonic()
    asyncio.run(asyncio.wait_for(model.execute([req]), 5.0))
    assert 0.5 < time.monotonic() - start < 3.0
    assert ended_once(req, error="decode failed: endpoint decode sent nothing within 0.6 s")
    assert [c for c in triton.calls if c.is_stop and c.model == "decode"]  # freed there

    model, triton = router(phases({"decode": waits_for_kv}), **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode,decode_b", Param.KV_TRANSFER_DEADLINE_S: "0.6"})
    req = request()
    route(model, req)
    assert req.tokens == OUTPUT and ended_once(req)  # the other decode served it whole
    assert len(work(triton, "decode")) == len(work(triton, "decode_b")) == 1
