"""Properties of the analytical estimate, and its closed-loop behaviour."""

from __future__ import annotations

import math

import pytest

from pdtrt.enums import KVDType, ServingMode
from pdtrt.errors import InfeasibleError
from pdtrt.perf.estimate import Load, ServingConfig, estimate
from pdtrt.perf.factors import DEFAULT_FACTORS as F
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.perf.queueing import md1_wait_p90_s, md1_wait_s, poisson_quantile


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


def agg(model, gpu, n=1, **kw):
    return ServingConfig(mode=ServingMode.AGGREGATED,
                         prefill=Instance(model=model, gpu=gpu, kv_dtype=KVDType.FP8, **kw),
                         prefill_instances=n)


def disagg(model, pgpu, dgpu, a=1, b=2):
    p = Instance(model=model, gpu=pgpu, kv_dtype=KVDType.FP8, max_batch_size=8)
    d = Instance(model=model, gpu=dgpu, kv_dtype=KVDType.FP8)
    return ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=p, prefill_instances=a,
                         decode=d, decode_instances=b, link=kv_link(pgpu, dgpu))


def test_md1_closed_form():
    assert md1_wait_s(0.5, 2.0) == pytest.approx(1.0)  # 0.5 * 2 / (2 * 0.5)
    assert md1_wait_s(0.0, 2.0) == 0 and math.isinf(md1_wait_s(1.0, 2.0))
    assert md1_wait_p90_s(0.05, 1.0) == 0
    assert md1_wait_p90_s(0.8, 1.0) == pytest.approx(2.0 / 0.8 * math.log(8))
    assert poisson_quantile(100) == pytest.approx(100 + 12.816 - 0.5, abs=1e-3)


@pytest.mark.parametrize("bw_scale", [1.5, 3.0])
def test_more_bandwidth_is_never_slower(llama8b, catalog, bw_scale):
    base = catalog.get("l40s")
    faster = base.model_copy(update={"memory_bw_bytes_per_s": base.memory_bw_bytes_per_s
                                     * bw_scale})
    for rate in (0.5, 2.0, 4.0):
        load = Load(isl=3000, osl=500, rate_per_s=rate)
        slow, fast = (estimate(agg(llama8b, g), load, F) for g in (base, faster))
        assert fast.point.tpot_s <= slow.point.tpot_s
        assert fast.ttft_s <= slow.ttft_s
    # Closed loop: faster decode brings clients back sooner, so TTFT may rise (more prefills
    # per second), but throughput and the end-to-end latency never get worse.
    load = Load(isl=3000, osl=500, concurrency=32)
    slow, fast = (estimate(agg(llama8b, g), load, F) for g in (base, faster))
    assert fast.req_per_s >= slow.req_per_s
    assert fast.ttft_s + 499 * fast.point.tpot_s <= slow.ttft_s + 499 * slow.point.tpot_s


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_longer_prompt_never_gives_faster_ttft(llama8b, catalog, mode):
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")
    cfg = agg(llama8b, h100) if mode == "agg" else disagg(llama8b, h100, l40s)
    ttfts = [estimate(cfg, Load(isl=isl, osl=200, rate_per_s=2.0), F).ttft_s
             for isl in (128, 512, 1024, 2048, 4096, 8192)]
    assert ttfts == sorted(ttfts)


def test_more_instances_never_lower_throughput(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    load = Load(isl=3000, osl=500, concurrency=128)
    rates = [estimate(agg(llama8b, h100, n), load, F).req_per_s for n in (1, 2, 4)]
    assert rates == sorted(rates) and rates[-1] > rates[0]


def test_closed_loop_queueing_raises_ttft_and_tpot(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    ests = [estimate(agg(llama8b, h100), Load(isl=3000, osl=500, concurrency=c), F)
            for c in (1, 16, 64, 256)]
    ttft = [e.ttft_s for e in ests]
    tpot = [e.point.tpot_s for e in ests]
    assert ttft == sorted(ttft) and tpot == sorted(tpot)
    # queueing, not a roofline at fixed batch; prompts run ahead of decodes, so most of the
    # load goes into TPOT (every prompt stalls every decode) and TTFT stays bounded: prompts
    # that wait together share a step (two 3000-token prompts per 8192-token step here)
    assert ttft[-1] > 2 * ttft[0] and tpot[-1] > 5 * tpot[0]
    many = estimate(agg(llama8b, h100), Load(isl=3000, osl=500, concurrency=1024), F)
    assert any(x.startswith("KV-bound: 1024 clients") for x in many.limits)
    assert ttft[-1] < many.ttft_s < math.inf  # the clients beyond the KV cache wait a slot
    # Little's law holds: C = r * (TTFT + (osl - 1) TPOT) while every client is running
    e = ests[1]
    assert e.req_per_s * (e.ttft_s + 499 * e.point.tpot_s) == pytest.approx(16, rel=1e-3)


def test_prefills_interrupt_decode_in_aggregated(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    low = estimate(agg(llama8b, h100), Load(isl=3000, osl=500, rate_per_s=0.2), F).point
    high = estimate(agg(llama8b, h100), Load(isl=3000, osl=500, rate_per_s=8), F).point
    assert high.tpot_s > 1.3 * low.tpot_s
    assert high.tpot_p90_s >= high.tpot_s


def test_open_loop_beyond_capacity_is_unstable(llama8b, catalog):
    est = estimate(agg(llama8b, catalog.get("h100-sxm")), Load(isl=3000, osl=500,
                                                                 rate_per_s=1000.0), F)
    assert not est.point.stable and math.isinf(est.ttft_s)
    d = est.to_dict()
    assert d["ttft_ms"] is None and d["req_per_s"] == 0 and d["usd_per_mtok"] is None


def test_disaggregated_decode_is_not_interrupted(llama8b, catalog):
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")
    e = estimate(disagg(llama8b, h100, l40s), Load(isl=3000, osl=500, rate_per_s=2.0), F)
    p = e.point
    assert p.kv_transfer_s == pytest.approx(50e-6 + 3000 * 65536 / 32e9)
    assert p.tpot_s == pytest.approx(p.decode_step_s + (p.kv_transfer_s + p.decode_step_s / 2)
                                     / 499, rel=0.02)
    assert e.config.num_gpus == 3
    assert e.config.cost_per_hour_usd() == pytest.approx(4.916 + 2 * 1.86)


def test_load_needs_exactly_one_of_rate_and_concurrency():
    with pytest.raises(InfeasibleError):
        Load(isl=1, osl=1)
    with pytest.raises(InfeasibleError):
        Load(isl=1, osl=1, rate_per_s=1, concurrency=1)


def test_a_cold_estimate_takes_well_under_a_millisecond_budget(llama8b, catalog):
    """benchmarks/plan_sim_speed.py measures it (≈0.15 ms); this guards the order of
    magnitude with room for a loaded CI machine."""
    import time

    from pdtrt.perf.factors import load_factors
    from pdtrt.perf.step import step_time

    f = load_factors()
    cfg = disagg(llama8b, catalog.get("h100-sxm"), catalog.get("l40s"))
    times = []
    for rate in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0):
        step_time.cache_clear()
        t = time.perf_counter()
        estimate(cfg, Load(isl=3000, osl=500, rate_per_s=rate), f)
        times.append(time.perf_counter() - t)
    assert sorted(times)[len(times) // 2] < 5e-3
