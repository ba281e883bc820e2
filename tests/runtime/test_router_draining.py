"""A router and a draining endpoint (docs/drain.md): a request it refuses is retried on the pool's
other endpoint with nothing lost, the endpoint is out of the pool as *draining* -- not ejected,
not counted as a failure -- its calls in flight keep their patience, and it comes back when
its drain ends."""

from __future__ import annotations

import asyncio

from pdtrt.engine_io import Param, Role
from pdtrt.runtime.engine.drain import NOT_ADMITTED, PROBED
from pdtrt.runtime.router.pool import EndpointState
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import Fail, wait_until
from tests.runtime.test_router_failover import POOLS, is_probe, metric, phases, work
from tests.runtime.test_router_model import OUTPUT, ended_once, request, route, tokens_out


def draining_decode(state):
    """decode_b, as a drained pdtrt engine answers while ``state["draining"]``."""
    def answer(call):
        if not state["draining"]:
            return [] if call.is_stop else [tokens_out(t) for t in OUTPUT]
        if is_probe(call):
            return [Fail(PROBED)]
        return [] if call.is_stop else [Fail(NOT_ADMITTED)]
    return answer


def test_a_request_a_draining_endpoint_refuses_goes_to_another_and_it_comes_back(router):
    state = {"draining": True}
    clock = FakeClock()
    model, triton = router(phases({"decode_b": draining_decode(state)}), clock=clock, **{
        **POOLS, Param.DECODE_ENDPOINTS: "decode_b,decode"})  # decode_b is chosen first
    route(model, first := request(request_id="r1"))
    assert first.tokens == OUTPUT and ended_once(first)  # retried on decode, nothing lost
    decode_b = model.pools[Role.DECODE].endpoints[0]
    assert decode_b.state is EndpointState.DRAINING
    assert "draining" in model.pools[Role.DECODE].describe()
    assert metric(triton, "pdtrt_router_endpoint_healthy", phase="decode",
                  endpoint="decode_b") == 0
    ejections = "pdtrt_router_endpoint_ejections_total{endpoint=decode_b,phase=decode}"
    assert triton.metrics.get(ejections, 0) == 0  # a drain is not a failure
    route(model, *(request(request_id=f"r{i}") for i in range(2, 5)))
    assert len(work(triton, "decode_b")) == 1  # only the first request was sent there

    state["draining"] = False  # resumed
    clock.advance(1.0)
    assert asyncio.run(model.prober.check(decode_b)) is None
    assert decode_b.state is EndpointState.HEALTHY
    route(model, *(request(request_id=f"s{i}") for i in range(4)))
    assert len(work(triton, "decode_b")) > 1


def test_a_slow_call_on_a_draining_endpoint_is_waited_for(router):
    probes = []

    def slow(call):
        if is_probe(call):
            probes.append(call)
            return [Fail(PROBED)]  # drained while this call was in flight
        if call.is_stop:
            return []
        return slowly()

    def slowly():
        yield tokens_out(7)
        wait_until(lambda: len(probes) >= 3)  # three liveness deadlines, each probe "draining"
        yield from (tokens_out(t) for t in OUTPUT[1:])

    model, _ = router(phases({"decode": slow}), **{
        Param.LIVENESS_S: "0.2", Param.PROBE_TIMEOUT_S: "0.5"})
    route(model, req := request())
    assert req.tokens == OUTPUT and ended_once(req)
