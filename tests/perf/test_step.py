"""Step-time formulas against hand calculations (Llama-3.1-8B: 32 layers, h 4096, 32 heads,
8 KV heads, head dim 128, MLP 14336, vocabulary 128256, untied LM head)."""

from __future__ import annotations

import pytest

from pdtrt.enums import KVDType, WeightQuant
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link, kv_transfer_s
from pdtrt.perf.step import (
    StepWork,
    decode_work,
    prefill_chunk_work,
    prefill_time_s,
    step_time,
)

L, H, DQ, DKV, FF, V = 32, 4096, 4096, 1024, 14336, 128256
P_LINEAR = L * (H * DQ + 2 * H * DKV + DQ * H + 3 * H * FF)  # 6,979,321,856
IDEAL = EfficiencyFactors(gemm_eff=1.0, attention_eff=1.0, bandwidth_eff=1.0,
                          step_overhead_s=0.0, allreduce_latency_s=0.0)


@pytest.fixture
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts("meta-llama/Meta-Llama-3.1-8B")


def inst(model, gpu, **kw):
    return Instance(model=model, gpu=gpu, **kw)


def test_linear_params_hand_count(llama8b):
    assert llama8b.num_layer_linear_params == P_LINEAR == 6_979_321_856


def test_prefill_flops_and_time_hand_calculation(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    n = 2000
    work = prefill_chunk_work(n)
    assert work.prefill_pairs == n * (n + 1) / 2
    t = step_time(work, inst(llama8b, h100), IDEAL)
    gemm_flops = 2 * P_LINEAR * n + 2 * V * H  # projections + LM head once
    attn_flops = 4 * L * DQ * n * (n + 1) / 2
    assert t.gemm_s == pytest.approx(gemm_flops / 989e12)
    assert t.attention_s == pytest.approx(attn_flops / 989e12)
    assert t.bound == "compute"
    assert t.total_s == pytest.approx((gemm_flops + attn_flops) / 989e12)


def test_fp8_weights_use_fp8_peak(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    work = prefill_chunk_work(4096)
    bf16 = step_time(work, inst(llama8b, h100), IDEAL)
    fp8 = step_time(work, inst(llama8b, h100, weights=WeightQuant.FP8), IDEAL)
    assert fp8.gemm_s == pytest.approx(bf16.gemm_s * 989 / 1979)
    assert fp8.attention_s == bf16.attention_s  # attention stays BF16 with a BF16 KV cache


def test_decode_bytes_hand_calculation(llama8b, catalog):
    l40s = catalog.get("l40s")
    i = inst(llama8b, l40s, kv_dtype=KVDType.FP8)
    t = step_time(decode_work(16, 16 * 3000), i, IDEAL)
    weights = (P_LINEAR + V * H + (2 * L + 1) * H) * 2  # linear + LM head + norms, BF16
    kv_per_token = L * 8 * 2 * 128 * 1  # FP8: 65,536 B
    assert kv_per_token == 65_536
    bytes_read = weights + kv_per_token * (16 * 3000 + 16)
    assert t.memory_s == pytest.approx(bytes_read / 864e9)
    assert t.bound == "memory"


def test_tp_allreduce_over_gpu_link(llama8b, catalog):
    h100 = catalog.get("h100-sxm")
    f = EfficiencyFactors(gemm_eff=1, attention_eff=1, bandwidth_eff=1, step_overhead_s=0,
                          allreduce_latency_s=10e-6)
    t = step_time(decode_work(8, 8000), inst(llama8b, h100, tp=4), f)
    payload = 8 * H * 2
    assert t.comm_s == pytest.approx(2 * L * (10e-6 + 2 * 3 / 4 * payload / 450e9))
    assert step_time(decode_work(8, 8000), inst(llama8b, h100), f).comm_s == 0


def test_chunking_costs_steps_and_attention(llama8b, catalog):
    i = inst(llama8b, catalog.get("h100-sxm"), max_num_tokens=1024)
    f = EfficiencyFactors(gemm_eff=0.5, attention_eff=0.5, bandwidth_eff=0.8,
                          step_overhead_s=1e-3, allreduce_latency_s=0)
    whole = prefill_time_s(i, f, 4096, chunk_tokens=4096)
    chunked = prefill_time_s(i, f, 4096)
    assert chunked > whole  # 3 extra step overheads, re-read weights
    c2 = prefill_chunk_work(1024, 1024)
    assert c2.prefill_pairs == 1024 * 1024 + 1024 * 1025 / 2


def test_step_work_adds_up():
    w = decode_work(3, 300) + prefill_chunk_work(100, 0) + StepWork()
    assert (w.tokens, w.logits, w.decode_context_tokens, w.prefill_tokens) == (103, 4, 300, 100)


def test_kv_link_choice(catalog):
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")
    assert kv_link(h100, h100, same_node=True).bytes_per_s == 450e9
    cross = kv_link(h100, h100)
    assert (cross.name, cross.bytes_per_s) == ("NIC", 50e9)
    het = kv_link(h100, l40s)
    assert (het.name, het.bytes_per_s) == ("l40s host link", 32e9)
    # 3000 tokens of FP8 KV (64 KiB each) over 32 GB/s
    assert kv_transfer_s(het, 3000, 65_536) == pytest.approx(het.latency_s + 3000 * 65536 / 32e9)


def test_fp8_weights_refused_without_fp8(llama8b, catalog):
    from pdtrt.errors import InfeasibleError

    with pytest.raises(InfeasibleError, match="no FP8"):
        inst(llama8b, catalog.get("a100-sxm"), weights=WeightQuant.FP8)


# -- the kernel-curve step model ------------------------------------------------------------

@pytest.fixture(scope="module")
def curves_f():
    from pdtrt.perf.kernels import load_kernel_factors

    return EfficiencyFactors(gemm_eff=0.5, attention_eff=0.5, bandwidth_eff=0.8,
                             step_overhead_s=2e-4, allreduce_latency_s=0.0,
                             eager_layer_overhead_s=1e-4, kernels=load_kernel_factors())


def test_decode_gemms_never_beat_streaming_weights_from_dram(llama8b, catalog, curves_f):
    l40s = catalog.get("l40s")
    t = step_time(decode_work(1, 3000), inst(llama8b, l40s), curves_f)
    stream = curves_f.kernels.gpus["l40s"].weight_stream_bw_eff["bf16"]
    linear = P_LINEAR * 2 + V * H * 2  # layers' weights + LM head, BF16
    assert t.gemm_s >= linear / (864e9 * stream) * (1 - 1e-9)
    assert t.gemm_s < 1.1 * linear / (864e9 * stream)  # and decode is bandwidth-bound


def test_each_gpu_and_dtype_on_its_own_curve(llama8b, catalog, curves_f):
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")
    work = prefill_chunk_work(4096)
    bf16 = step_time(work, inst(llama8b, h100), curves_f)
    fp8 = step_time(work, inst(llama8b, h100, weights=WeightQuant.FP8), curves_f)
    # FP8 GEMMs are faster, but by less than the 2x of the peaks: their efficiency is lower
    assert 1.0 < bf16.gemm_s / fp8.gemm_s < 2.0
    slow = step_time(work, inst(llama8b, l40s), curves_f)
    assert slow.gemm_s > 2 * bf16.gemm_s  # 362 vs 989 TFLOP/s, each at its own efficiency


def test_cuda_graphs_spare_decode_steps_the_launch_overhead(llama8b, catalog, curves_f):
    from pdtrt.perf.step import CUDA_GRAPH_MAX_BATCH

    i = inst(llama8b, catalog.get("h100-sxm"))
    eager = L * curves_f.eager_layer_overhead_s
    assert step_time(decode_work(8, 8000), i, curves_f).overhead_s == pytest.approx(2e-4)
    assert step_time(prefill_chunk_work(100), i, curves_f).overhead_s == pytest.approx(
        2e-4 + eager)
    big = CUDA_GRAPH_MAX_BATCH + 1
    assert step_time(decode_work(big, big * 100), i, curves_f).overhead_s == pytest.approx(
        2e-4 + eager)


def test_tp_sync_term_grows_with_log2_tp_in_eager_steps_only(llama8b, catalog, curves_f):
    from dataclasses import replace

    f = replace(curves_f, tp_sync_layer_s=1e-5)
    base = 2e-4 + L * curves_f.eager_layer_overhead_s
    for tp, doublings in ((1, 0), (2, 1), (8, 3)):
        i = inst(llama8b, catalog.get("h100-sxm"), tp=tp)
        assert step_time(prefill_chunk_work(100), i, f).overhead_s == pytest.approx(
            base + L * 1e-5 * doublings)
        assert step_time(decode_work(8, 8000), i, f).overhead_s == pytest.approx(2e-4)


def test_prefill_seq_term_is_paid_per_prompt_the_step_admits(llama8b, catalog, curves_f):
    from dataclasses import replace

    f = replace(curves_f, prefill_seq_overhead_s=1e-3)
    i = inst(llama8b, catalog.get("h100-sxm"), tp=4)
    two = prefill_chunk_work(100) + prefill_chunk_work(200)
    assert step_time(two, i, f).overhead_s == pytest.approx(
        step_time(two, i, curves_f).overhead_s + 2e-3)
    assert step_time(decode_work(8, 8000), i, f).overhead_s == pytest.approx(2e-4)


def test_tp_allreduce_on_the_measured_curve(llama8b, catalog, curves_f):
    i = inst(llama8b, catalog.get("h100-sxm"), tp=4)
    t = step_time(decode_work(8, 8000), i, curves_f)
    ar = curves_f.kernels.gpus["h100-sxm"].allreduce_s(4, 8 * H * 2)
    assert t.comm_s == pytest.approx(2 * L * ar)


def test_gpu_without_curves_uses_the_scalar_model(llama8b, catalog, curves_f):
    a10g = catalog.get("a10g")
    work = prefill_chunk_work(1000)
    t = step_time(work, inst(llama8b, a10g), curves_f)
    assert t.gemm_s == pytest.approx((2 * P_LINEAR * 1000 + 2 * V * H)
                                     / (a10g.bf16_dense_flops_per_s * 0.5))
