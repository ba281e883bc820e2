"""KV-aware routing against the fake seam (issue 27, item 2): the engine's KV-events log, the
router's KV index fed from it, the endpoint choice by cached overlap and load, and an index
that never outlives what it knows (ejection, a restarted engine)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from pdtrt.engine_io import KV_EVENTS_OUTPUT, Param, Role
from pdtrt.kv_blocks import block_hashes
from pdtrt.runtime.engine.kv_events import KvEventLog, events_enabled
from pdtrt.runtime.request_parsing import KV_EVENTS_CURSOR
from pdtrt.runtime.router.kv_index import KvIndex
from tests.runtime.fake_triton import Fail, FakeRequest, tokens_out
from tests.runtime.test_router_failover import DEAD, is_probe, metric
from tests.runtime.test_router_model import OUTPUT, PARAMS, ended_once, route

TPB = 4
SYSTEM = list(range(100, 116))  # a 16-token shared prefix: four blocks
KV = {Param.ROUTING: "kv_aware", Param.KV_BLOCK_TOKENS: str(TPB),
      Param.PREFILL_ENDPOINTS: "prefill,prefill_b", Param.DECODE_ENDPOINTS: "decode,decode_b",
      Param.LIVENESS_S: "0.5", Param.PROBE_TIMEOUT_S: "1"}


def stored(tokens, parent=None):
    hashes = block_hashes(tokens, TPB)
    return {"event_id": 0, "window_size": 0, "data": {
        "type": "stored", "parent_hash": parent,
        "blocks": [{"type": "stored_block", "block_hash": h} for h in hashes]}}


def removed(hashes):
    return {"event_id": 0, "window_size": 0, "data": {"type": "removed", "block_hashes": hashes}}


class Engine:
    """One engine instance's events (what ``LLM.get_kv_cache_events`` would drain) and its log."""

    def __init__(self) -> None:
        self.pending: list[dict] = []
        self.log = KvEventLog(self.drain)

    def drain(self):
        out, self.pending = self.pending, []
        return out

    def restart(self) -> None:
        self.pending, self.log = [], KvEventLog(self.drain)


def chat(prompt, rid="r1", max_new=4):
    return FakeRequest(rid, {
        "input_ids": np.array([prompt], dtype=np.int32),
        "input_lengths": np.array([len(prompt)], dtype=np.int32),
        "request_output_len": np.array([max_new], dtype=np.int32),
        "streaming": np.array([True]), "exclude_input_in_output": np.array([True])})


def fleet(engines, dead=()):
    """Phase models answering like pdtrt's engine models, KV-events requests from each model's
    :class:`Engine`; the models in ``dead`` answer everything as a dead stub does."""
    def answer(call):
        if call.model in dead:
            return [Fail(DEAD)]
        if KV_EVENTS_CURSOR in call.inputs:
            cursor = call.inputs[KV_EVENTS_CURSOR].reshape(-1)[0].decode()
            text = engines[call.model].log.answer(cursor)
            return [{KV_EVENTS_OUTPUT: np.array([text.encode()], dtype=np.object_)}]
        return phase_answer(call)
    return answer


def phase_answer(call):
    """A phase call's answer, as pdtrt's engine models give it: a stop ends at once, a prefill
    answers the first token and the hand-off, a decode the whole output."""
    if call.is_stop:
        return []
    if call.model.startswith("prefill"):
        return [tokens_out(OUTPUT[0], context_phase_params=PARAMS)]
    return [tokens_out(t) for t in OUTPUT]


def work(triton, model):
    """The phase calls ``model`` got: no probe, stop or KV-events request."""
    return [c for c in triton.calls if c.model == model and not c.is_stop
            and KV_EVENTS_CURSOR not in c.inputs]


def refresh(model):
    asyncio.run(model.refresh_kv_index())


@pytest.fixture
def engines():
    return {m: Engine() for m in ("prefill", "prefill_b", "decode", "decode_b")}


# -- the engine's log and the router's index ----------------------------------------------------
def test_the_index_follows_the_log_by_snapshot_then_by_changes():
    engine, index = Engine(), KvIndex()
    engine.pending.append(stored(SYSTEM))
    index.apply(engine.log.answer(index.cursor()))
    assert index.snapshots == 1 and index.overlap(block_hashes(SYSTEM + [1, 2, 3, 4], TPB)) == 4
    engine.pending += [stored(SYSTEM + [1, 2, 3, 4]), removed(block_hashes(SYSTEM, TPB)[3:])]
    answer = json.loads(engine.log.answer(index.cursor()))
    assert "changes" in answer and "snapshot" not in answer  # only what changed crosses
    index.apply(json.dumps(answer))
    assert index.snapshots == 1
    # block 4 of SYSTEM went: the chain is cut there, whatever is cached after it
    assert index.overlap(block_hashes(SYSTEM + [1, 2, 3, 4], TPB)) == 3
    assert index.num_blocks == len(engine.log._blocks) == 4


def test_a_cursor_the_log_cannot_serve_gets_a_snapshot():
    engine, index = Engine(), KvIndex()
    engine.log = KvEventLog(engine.drain, max_changes=2)
    index.apply(engine.log.answer(""))
    for i in range(3):  # three changes: the oldest falls out of a ring of two
        engine.pending.append(stored([200 + i] * TPB))
    answer = json.loads(engine.log.answer(index.cursor()))
    assert sorted(answer["snapshot"]) == sorted(engine.log._blocks)
    index.apply(json.dumps(answer))
    engine.pending.append({"data": {"type": "created", "num_blocks_per_cache_level": [8, 0]}})
    assert json.loads(engine.log.answer(index.cursor()))["snapshot"] == []  # a new cache


def test_a_restarted_engine_replaces_its_old_epoch_and_its_blocks():
    engine, index = Engine(), KvIndex(instances=1)
    engine.pending.append(stored(SYSTEM))
    index.apply(engine.log.answer(index.cursor()))
    engine.restart()  # a reloaded model: a new log, nothing cached
    index.apply(engine.log.answer(index.cursor()))
    assert index.overlap(block_hashes(SYSTEM, TPB)) == 0 and index.num_blocks == 0


def test_an_endpoint_of_two_instances_keeps_both_and_matches_the_best():
    a, b, index = Engine(), Engine(), KvIndex(instances=2)
    a.pending.append(stored(SYSTEM[:8]))
    b.pending.append(stored(SYSTEM))
    for engine in (a, b, a):
        index.apply(engine.log.answer(index.cursor()))  # the cursor names both epochs
    assert index.overlap(block_hashes(SYSTEM, TPB)) == 4 and index.snapshots == 2


def test_an_answer_that_does_not_read_leaves_the_index_as_it_was():
    engine, index = Engine(), KvIndex()
    engine.pending.append(stored(SYSTEM))
    index.apply(engine.log.answer(""))
    with pytest.raises(ValueError, match="does not read"):
        index.apply('{"epoch": 1}')
    with pytest.raises(ValueError, match="unknown epoch"):
        index.apply('{"epoch": "other", "seq": 3, "changes": []}')
    assert index.overlap(block_hashes(SYSTEM, TPB)) == 4


def test_events_need_block_reuse_and_a_buffer():
    assert events_enabled({"kv_cache_config": {"enable_block_reuse": True,
                                               "event_buffer_max_size": 16}})
    assert not events_enabled({"kv_cache_config": {"enable_block_reuse": True}})
    assert not events_enabled({"kv_cache_config": {"enable_block_reuse": False,
                                                   "event_buffer_max_size": 16}})


# -- the router's choice ---------------------------------------------------------------------
def test_a_request_goes_to_the_endpoint_that_holds_its_prefix(router, engines):
    model, triton = router(fleet(engines), **KV)
    engines["prefill_b"].pending.append(stored(SYSTEM))
    refresh(model)
    req = chat(SYSTEM + [1, 2, 3])
    route(model, req)
    assert ended_once(req) and req.tokens == OUTPUT
    assert len(work(triton, "prefill_b")) == 1 and work(triton, "prefill") == []
    assert metric(triton, "pdtrt_router_kv_cached_tokens_total", phase="prefill") == 16
    assert metric(triton, "pdtrt_router_kv_prompt_tokens_total", phase="prefill") == 19
    assert metric(triton, "pdtrt_router_kv_index_blocks", phase="prefill",
                  endpoint="prefill_b") == 4


def test_least_load_ignores_the_cache_where_kv_aware_follows_it(router, engines):
    model, triton = router(fleet(engines), **{**KV, Param.ROUTING: "least_load"})
    engines["prefill_b"].pending.append(stored(SYSTEM))
    refresh(model)  # nothing polled: least_load keeps no index
    route(model, chat(SYSTEM + [1, 2, 3]))
    assert len(work(triton, "prefill")) == 1
    assert not [c for c in triton.calls if KV_EVENTS_CURSOR in c.inputs]


def test_a_hot_prefix_spreads_when_its_endpoint_is_loaded(router, engines):
    model, triton = router(fleet(engines), **KV)
    engines["prefill_b"].pending.append(stored(SYSTEM))
    refresh(model)
    busy = model.pools[Role.PREFILL].endpoints[1]
    busy.outstanding_tokens = 17  # owes more than the 16 cached tokens save
    route(model, chat(SYSTEM + [1, 2, 3]))
    assert len(work(triton, "prefill")) == 1
    busy.outstanding_tokens = 15  # owes less: the cache wins again
    route(model, chat(SYSTEM + [1, 2, 3], rid="r2"))
    assert len(work(triton, "prefill_b")) == 1


def test_round_robin_alternates_whatever_the_load(router, engines):
    model, triton = router(fleet(engines), **{**KV, Param.ROUTING: "round_robin"})
    model.pools[Role.PREFILL].endpoints[1].outstanding_tokens = 1000
    route(model, *(chat(SYSTEM, rid=f"r{i}") for i in range(4)))
    assert len(work(triton, "prefill")) == len(work(triton, "prefill_b")) == 2


def test_a_short_net_new_prompt_is_prefilled_where_its_decode_kv_is(router, engines):
    model, triton = router(fleet(engines), **KV, **{
        Param.MAX_LOCAL_PREFILL_TOKENS: "4", Param.LOCAL_PREFILL_LIMIT: "64"})
    engines["decode_b"].pending.append(stored(SYSTEM))  # the last turn was decoded there
    refresh(model)
    route(model, chat(SYSTEM + [1, 2, 3], rid="turn2"))  # 3 net-new tokens on decode_b
    route(model, chat([7] * 19, rid="other"))  # 19 net-new everywhere: remote
    local = work(triton, "decode_b")
    assert [c.request_type.value for c in local] == ["context_and_generation"]
    assert len(work(triton, "prefill") + work(triton, "prefill_b")) == 1
    assert metric(triton, "pdtrt_router_prefill_path_total", path="local",
                  reason="short_net_new") == 1


# -- an index never outlives what it knows -------------------------------------------------
def test_an_ejected_endpoint_loses_its_index_and_a_restarted_one_starts_empty(router, engines):
    model, triton = router(fleet(engines), **KV)
    engines["prefill_b"].pending.append(stored(SYSTEM))
    refresh(model)
    b = model.pools[Role.PREFILL].endpoints[1]
    assert b.kv.num_blocks == 4
    triton.phases = fleet(engines, dead={"prefill_b"})  # its stub dies
    refresh(model)  # the poll finds it dead: ejected, its index cleared
    assert not b.healthy and b.kv.num_blocks == 0
    assert metric(triton, "pdtrt_router_kv_index_blocks", phase="prefill",
                  endpoint="prefill_b") == 0
    engines["prefill_b"].restart()  # reloaded: a new epoch with an empty cache
    triton.phases = fleet(engines)
    asyncio.run(model.prober.check(b))  # re-admitted by a probe
    refresh(model)
    assert b.healthy and b.kv.num_blocks == 0 and b.kv.snapshots == 2  # resynchronised
    route(model, chat(SYSTEM + [1, 2, 3]))
    assert len(work(triton, "prefill")) == 1  # least loaded, not the stale prefix holder


def test_an_engine_without_block_reuse_is_not_asked_again(router, engines):
    def no_events(call):
        if KV_EVENTS_CURSOR in call.inputs:
            return [Fail("this engine records no KV cache events (...)")]
        return fleet(engines)(call)
    model, triton = router(no_events, **KV)
    refresh(model)
    refresh(model)
    asked = [c for c in triton.calls if KV_EVENTS_CURSOR in c.inputs]
    assert len(asked) == 4  # each endpoint once
    assert all(e.healthy for pool in model.pools.values() for e in pool.endpoints)
    assert not [c for c in triton.calls if is_probe(c)]


# -- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize(("params", "error"), [
    ({Param.ROUTING: "nearest"}, "routing 'nearest' is not one of least_load, round_robin, "
     "kv_aware"),
    ({Param.ROUTING: "kv_aware"}, "routing kv_aware needs kv_block_tokens"),
])
def test_a_router_config_with_a_bad_routing_is_refused(params, error):
    from pdtrt.runtime.router.config import RouterConfig

    with pytest.raises(ValueError, match=error):
        RouterConfig.from_params({Param.PREFILL_MODEL: "prefill", Param.DECODE_MODEL: "decode",
                                  **params})

