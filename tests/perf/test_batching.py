"""Prompts share steps as TensorRT-LLM's micro-batch scheduler packs them (pdtrt.perf.batching),
and the short-request maximum throughput that follows from it."""

from __future__ import annotations

import math

import pytest

from pdtrt.enums import KVDType, ServingMode, WeightQuant
from pdtrt.perf.batching import prompt_steps
from pdtrt.perf.estimate import Load, ServingConfig, estimate
from pdtrt.perf.factors import load_factors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.step import decode_work, prefill_chunk_work, prefill_time_s, step_time

F = load_factors()


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


@pytest.fixture(scope="module")
def h100_fp8(llama8b, catalog):
    return Instance(model=llama8b, gpu=catalog.get("h100-sxm"), weights=WeightQuant.FP8,
                    kv_dtype=KVDType.FP8, max_batch_size=2048, max_num_tokens=8192)


def test_a_step_pays_its_fixed_costs_once_for_all_its_prompts(h100_fp8):
    one = step_time(prefill_chunk_work(128), h100_fp8, F).total_s
    work = prefill_chunk_work(128)
    for _ in range(15):
        work = work + prefill_chunk_work(128)
    sixteen = step_time(work, h100_fp8, F).total_s
    # weights read, launches and the scheduler's iteration are shared by the 16 prompts
    assert sixteen < 16 * one / 4
    assert sixteen > one


def test_light_load_prefills_each_group_of_arrivals_in_one_step(h100_fp8):
    ps = prompt_steps(h100_fp8, F, isl=128, rate_per_s=1.0, burst=3)
    t3 = step_time(prefill_chunk_work(128) + prefill_chunk_work(128)
                   + prefill_chunk_work(128), h100_fp8, F).total_s
    assert ps.batched and ps.prompts_per_step == 3
    assert ps.latency_s == pytest.approx(t3)  # the burst-mates share the prompt's step
    assert ps.busy == pytest.approx(1.0 * t3 / 3)
    assert ps.wait_s == pytest.approx(ps.busy * t3 / 2)  # the step in progress, if any


def test_heavy_load_fills_steps_with_the_prompts_that_arrived_meanwhile(h100_fp8):
    dec = decode_work(1000, 1000 * 192)
    ps = prompt_steps(h100_fp8, F, isl=128, rate_per_s=300.0, decode=dec)
    assert ps.stable and ps.busy == pytest.approx(1.0)
    assert 1 < ps.prompts_per_step < (8192 - 1000) // 128
    # every step carries the prompts that arrived during the one before
    assert ps.prompts_per_step == pytest.approx(300.0 * ps.step_s, rel=1e-6)
    assert ps.service_s == pytest.approx(ps.step_s / ps.prompts_per_step)
    assert ps.utilisation < 1


def test_beyond_the_fullest_step_prompts_are_unstable(h100_fp8):
    dec = decode_work(1000, 1000 * 192)
    ps = prompt_steps(h100_fp8, F, isl=128, rate_per_s=5000.0, decode=dec)
    assert not ps.stable and math.isinf(ps.latency_s) and ps.utilisation > 1


def test_batch_size_slots_cap_the_prompts_of_a_step(h100_fp8):
    # 2040 running decodes leave 8 of max_batch_size's 2048 slots for new prompts
    dec = decode_work(2040, 2040 * 192)
    ps = prompt_steps(h100_fp8, F, isl=128, rate_per_s=400.0, decode=dec)
    assert ps.prompts_per_step <= 8


def test_prompts_longer_than_the_budget_run_chunk_by_chunk_one_after_another(h100_fp8):
    ps = prompt_steps(h100_fp8, F, isl=20000, rate_per_s=0.5)
    assert not ps.batched and ps.steps == 3 and ps.prompts_per_step == 1
    assert ps.service_s == pytest.approx(prefill_time_s(h100_fp8, F, 20000))
    assert ps.busy == pytest.approx(0.5 * ps.service_s)
    assert not prompt_steps(h100_fp8, F, isl=20000, rate_per_s=2 / ps.service_s).stable


def test_h100_fp8_short_request_max_throughput_matches_published(h100_fp8):
    # NVIDIA's TensorRT-LLM perf overview, Llama 3.1 8B, H100 TP1 FP8, ISL/OSL 128/128:
    # 28,312 output tok/s (docs/source/performance/perf-overview.md, NVIDIA/TensorRT-LLM at
    # 00f37686aa854010d68bcbd0f4ab000221541ca6; trtllm-bench, max_batch_size 2048 /
    # max_num_tokens 8192 for this shape). Issue 30's criterion: within 15%. No constant of
    # the model was fitted to it (the engine terms are fitted on shared/data only).
    cfg = ServingConfig(mode=ServingMode.AGGREGATED, prefill=h100_fp8)
    est = estimate(cfg, Load(isl=128, osl=128, concurrency=4096), F)
    assert est.output_tok_per_s == pytest.approx(28312, rel=0.15)
    assert est.point.prompts_per_step > 4  # many prompts share each step
