"""KV-capacity routing (issue 47, item 4): the engine model's capacity answer, the router's view
of it, and a decode pool of one small and one large endpoint filled in proportion -- on the
fake seam, and on two reference-twin LLMs of different KV sizes driven through the router's
own pool logic (in-process: the real schedulers, their real get_stats, the real pool and
cost; no Triton)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from pdtrt.endpoints import EndpointSpec
from pdtrt.engine_io import KV_CAPACITY_CURSOR, KV_EVENTS_OUTPUT, Param, Role
from pdtrt.enums import Routing
from pdtrt.runtime.request_parsing import KV_EVENTS_CURSOR
from pdtrt.runtime.router.kv_capacity import KvCapacity
from pdtrt.runtime.router.kv_upkeep import capacity_cost
from pdtrt.runtime.router.pool import Endpoint, EndpointPool, eject, outstanding
from tests.runtime.test_engine_model import ended_once as engine_ended_once
from tests.runtime.test_engine_model import engine_model, kv_events  # noqa: F401 -- fixture
from tests.runtime.test_engine_model import request as engine_request
from tests.runtime.test_kv_routing import phase_answer
from tests.runtime.test_router_model import OUTPUT, ended_once, route

TPB = 16
SMALL_BLOCKS, LARGE_BLOCKS = 16, 48  # an "L40S" and an "H100": a third of the blocks
NEED = 64  # tokens of KV one request holds at its end: 16 prompt + 48 new, four blocks


def endpoint(name, max_blocks=0, used=0):
    e = Endpoint(spec=EndpointSpec(model=name))
    if max_blocks:
        e.capacity.apply(json.dumps({"max_blocks": max_blocks, "used_blocks": used,
                                     "tokens_per_block": TPB}))
    return e


def fill(routing, n, *, small_used=0):
    """``n`` calls of :data:`NEED` tokens held open at once in a small + large pool; the
    blocks each endpoint's calls reserve, and the pool."""
    pool = EndpointPool(phase="decode", routing=routing, endpoints=[
        endpoint("small", SMALL_BLOCKS, small_used), endpoint("large", LARGE_BLOCKS)])
    held = []
    for _ in range(n):
        e = pool.choose(cost=capacity_cost(NEED))
        call = outstanding(e, 48, NEED)
        call.__enter__()
        held.append(call)
    return {e.label: e.reserved_tokens // TPB for e in pool.endpoints}


# -- the router's choice -------------------------------------------------------------------
def test_least_load_overfills_the_small_endpoint_where_capacity_fills_both_in_proportion():
    assert fill(Routing.LEAST_LOAD, 12) == {"small": 24, "large": 24}  # small: 24 of 16
    assert fill(Routing.KV_CAPACITY, 12) == {"small": 12, "large": 36}  # 75 % each


def test_an_endpoint_that_cannot_hold_the_request_gets_it_only_when_none_can():
    # the small one's engine reports 13 of 16 blocks used (another router's calls): four more
    # do not fit there, though it has no call of this router in flight
    assert fill(Routing.KV_CAPACITY, 1, small_used=13) == {"small": 0, "large": 4}
    assert fill(Routing.KV_CAPACITY, 16) == {"small": 16, "large": 48}  # both full: exactly
    assert fill(Routing.KV_CAPACITY, 17)["large"] + fill(Routing.KV_CAPACITY, 17)["small"] == 68


def test_an_endpoint_that_has_not_reported_is_tried_and_an_ejected_one_forgets_its_size():
    pool = EndpointPool(phase="decode", routing=Routing.KV_CAPACITY, endpoints=[
        endpoint("small", SMALL_BLOCKS, 8), endpoint("new")])
    assert pool.choose(cost=capacity_cost(NEED)).label == "new"
    small = pool.endpoints[0]
    eject(small, "probe failed", 1.0)
    assert not small.capacity.known


def test_the_reservation_ends_with_the_call():
    e = endpoint("decode", SMALL_BLOCKS)
    with outstanding(e, 48, NEED):
        assert e.reserved_tokens == NEED
        assert capacity_cost(NEED)(e) == 8 / SMALL_BLOCKS
    assert e.reserved_tokens == 0 and capacity_cost(NEED)(e) == 4 / SMALL_BLOCKS


def test_a_capacity_answer_that_does_not_read_leaves_the_capacity_as_it_was():
    capacity = KvCapacity()
    capacity.apply("{}")  # the engine has no stats yet
    assert not capacity.known
    capacity.apply('{"max_blocks": 16, "used_blocks": 3, "tokens_per_block": 16}')
    with pytest.raises(ValueError, match="does not read"):
        capacity.apply('{"max_blocks": 16}')
    assert (capacity.max_blocks, capacity.used_blocks) == (16, 3)


# -- the engine model's answer -------------------------------------------------------------
def test_the_engine_tells_a_router_its_kv_capacity_without_block_reuse(engine_model):  # noqa: F811
    model, _ = engine_model()
    assert kv_events(model, KV_CAPACITY_CURSOR) == {}  # no stats before the first request
    req = engine_request()
    model.execute([req])
    assert engine_ended_once(req)
    answer = kv_events(model, KV_CAPACITY_CURSOR)
    assert answer["tokens_per_block"] == TPB and answer["max_blocks"] > 0
    assert 0 <= answer["used_blocks"] <= answer["max_blocks"]


# -- the router on the fake seam -----------------------------------------------------------
def capacity_fleet(reported):
    """Phase models answering like pdtrt's engine models; a capacity request gets
    ``reported[model]`` (``{}`` for a model not in it)."""
    def answer(call):
        if KV_EVENTS_CURSOR in call.inputs:
            text = json.dumps(reported.get(call.model, {}))
            return [{KV_EVENTS_OUTPUT: np.array([text.encode()], dtype=np.object_)}]
        return phase_answer(call)
    return answer


def decodes(triton):
    return [c.model for c in triton.calls if c.model.startswith("decode") and not c.is_stop
            and KV_EVENTS_CURSOR not in c.inputs]


@pytest.mark.parametrize(("routing", "chosen"), [("least_load", "decode"),
                                                  ("kv_capacity", "decode_b")])
def test_the_router_polls_capacity_and_sends_the_decode_where_the_least_is_used(
        router, routing, chosen):
    reported = {"decode": {"max_blocks": 16, "used_blocks": 12, "tokens_per_block": TPB},
                "decode_b": {"max_blocks": 48, "used_blocks": 24, "tokens_per_block": TPB}}
    model, triton = router(capacity_fleet(reported), **{
        Param.ROUTING: routing, Param.DECODE_ENDPOINTS: "decode,decode_b"})
    asyncio.run(model.refresh_kv_index())
    polled = [c for c in triton.calls if KV_EVENTS_CURSOR in c.inputs]
    assert bool(polled) is (routing == "kv_capacity")
    req = engine_request(list(range(3, 8)), 4)
    route(model, req)
    assert ended_once(req) and req.tokens == OUTPUT
    # 13/16 of the small one's blocks against 25/48 of the large one's
    assert decodes(triton) == [chosen]
    assert model.pools[Role.DECODE].endpoints[1].capacity.max_blocks == \
        (48 if routing == "kv_capacity" else 0)


# -- the done-when: two reference-twin LLMs of different KV sizes --------------------------
def _twin(tiny_model, max_blocks):
    from pdtrt.llmapi.reference import LLM
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    return LLM._from_engine(ReferenceEngine(tiny_model, tokens_per_block=TPB),
                            kv_cache_config={"max_tokens": max_blocks * TPB},
                            enable_iter_perf_stats=True, max_batch_size=32)


async def _serve(llms, routing, num_requests):
    """``num_requests`` requests of :data:`NEED` tokens sent at once through a pool of the
    ``llms`` routed by ``routing`` (capacity read from each LLM's get_stats, the engine
    model's answer); per endpoint the most requests queued while its KV blocks were all in use
    (a request just submitted waits for the next iteration too, blocks or not) and the largest
    used fraction of its KV blocks, both read after every engine iteration (on the engine's
    thread: a reader polling from the event loop missed the full moment on a starved machine)."""
    from pdtrt.llmapi.reference import SamplingParams

    pool = EndpointPool(phase="decode", routing=routing, endpoints=[
        Endpoint(spec=EndpointSpec(model=name)) for name in llms])
    by_label = {e.label: e for e in pool.endpoints}
    peak = {name: [0, 0.0] for name in llms}

    def read():
        for name, llm in llms.items():
            stats = llm.get_stats(0)[-1]["kvCacheStats"]
            by_label[name].capacity.apply(json.dumps({
                "max_blocks": stats["maxNumBlocks"], "used_blocks": stats["usedNumBlocks"],
                "tokens_per_block": stats["tokensPerBlock"]}))

    def watched(name, llm):
        iteration = llm._scheduler._iteration

        def watch():
            iteration()
            kv = llm.get_stats(0)[-1]
            stats = kv["kvCacheStats"]
            if stats["usedNumBlocks"] >= stats["maxNumBlocks"]:  # queued for want of blocks
                peak[name][0] = max(peak[name][0], kv["numQueuedRequests"])
            peak[name][1] = max(peak[name][1], stats["usedNumBlocks"] / stats["maxNumBlocks"])
        return watch

    async def one(i):
        e = pool.choose(cost=capacity_cost(NEED))
        with outstanding(e, 48, NEED):
            prompt = [3 + i] + list(range(10, 25))  # 16 tokens
            await llms[e.label].generate_async(
                prompt, SamplingParams(max_tokens=NEED - 16, end_id=-1)).aresult()

    for llm in llms.values():  # one request each, so get_stats has something to say
        await llm.generate_async([5, 6], SamplingParams(max_tokens=1, end_id=-1)).aresult()
    read()
    for name, llm in llms.items():
        llm._scheduler._iteration = watched(name, llm)
    try:
        tasks = [asyncio.ensure_future(one(i)) for i in range(num_requests)]
        while not all(t.done() for t in tasks):
            read()
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
    finally:
        for llm in llms.values():
            del llm._scheduler._iteration  # the class's again
    return peak


def test_two_twins_of_different_kv_sizes_stay_below_capacity_under_kv_capacity(tiny_model):
    llms = {"small": _twin(tiny_model, SMALL_BLOCKS), "large": _twin(tiny_model, LARGE_BLOCKS)}
    try:
        # 12 requests of four blocks: 48 of the 64 blocks both hold, 24 of the small one's 16
        # under least load
        least = asyncio.run(_serve(llms, Routing.LEAST_LOAD, 12))
        capacity = asyncio.run(_serve(llms, Routing.KV_CAPACITY, 12))
    finally:
        for llm in llms.values():
            llm.shutdown()
    assert least["small"][0] > 0 and least["small"][1] == 1.0  # full, and queueing
    assert capacity["small"][0] == capacity["large"][0] == 0  # nothing waits for blocks
    assert capacity["small"][1] < 1.0 and capacity["large"][1] < 1.0
