"""Memory fit arithmetic and its properties."""

from __future__ import annotations

import pytest

from pdtrt.enums import KVDType
from pdtrt.errors import InfeasibleError
from pdtrt.facts.memory import (
    CUDA_GRAPH_FIXED_BYTES,
    GIB,
    GPU_RUNTIME_RESERVE_BYTES,
    NCCL_RESERVE_BYTES,
    cuda_graph_bytes,
    fit,
    min_tp_that_fits,
)
from pdtrt.facts.model import load_model_facts

LLAMA8B = "meta-llama/Meta-Llama-3.1-8B"


def test_llama8b_on_l40s_by_hand(catalog):
    m = load_model_facts(LLAMA8B)
    f = fit(m, catalog.get("l40s"), seq_len=3500, max_num_tokens=8192)
    weights = 2 * 8_030_261_248
    activations = 8192 * (2 * 4096 + (4096 + 2 * 1024) + 2 * 14336) * 2
    free = 48 * GIB - weights - GPU_RUNTIME_RESERVE_BYTES - activations
    blocks = int(free * 0.9) // (131_072 * 32)
    assert f.weight_bytes == weights
    assert f.activation_bytes == activations
    assert f.kv_blocks == blocks
    assert f.blocks_per_seq == 110  # ceil(3500 / 32)
    assert f.max_concurrent_seqs == blocks // 110 == 60


def test_fp8_kv_doubles_capacity(catalog):
    m = load_model_facts(LLAMA8B)
    bf16 = fit(m, catalog.get("l40s"), seq_len=3500)
    fp8 = fit(m, catalog.get("l40s"), seq_len=3500, kv_dtype=KVDType.FP8)
    assert fp8.kv_blocks == pytest.approx(2 * bf16.kv_blocks, abs=1)


def test_tp_adds_nccl_reserve_and_splits_weights(catalog):
    m = load_model_facts(LLAMA8B)
    f = fit(m, catalog.get("h100-sxm"), tp=2, seq_len=1000)
    assert f.runtime_reserve_bytes == GPU_RUNTIME_RESERVE_BYTES + NCCL_RESERVE_BYTES
    assert f.weight_bytes == 8_030_261_248  # half of the BF16 bytes


@pytest.mark.parametrize("gpu", ["l4", "l40s", "h100-sxm", "h200"])
def test_more_memory_never_fewer_sequences(catalog, gpu):
    m = load_model_facts("Qwen/Qwen3-8B")
    f = fit(m, catalog.get(gpu), seq_len=4096)
    bigger = fit(m, catalog.get("h200"), seq_len=4096)
    assert bigger.max_concurrent_seqs >= f.max_concurrent_seqs


def test_min_tp_70b_on_l40s(catalog):
    f = min_tp_that_fits(load_model_facts("meta-llama/Meta-Llama-3.1-70B"), catalog.get("l40s"),
                         seq_len=3500)
    assert f.tp == 4 and f.fits


def test_never_fits_shows_the_arithmetic(catalog):
    with pytest.raises(InfeasibleError, match=r"does not fit on l4 even at TP 8: .* weights "
                       r"94\.50 GiB"):
        min_tp_that_fits(load_model_facts("meta-llama/Meta-Llama-3.1-405B"), catalog.get("l4"),
                         seq_len=3500)


def test_cuda_graphs_by_hand():
    m = load_model_facts(LLAMA8B)
    # one token of Llama-3.1-8B at TP1: activations (2 x 4096 + 4096 + 2 x 1024 + 2 x 14336)
    # x 2 B = 86016 B, float32 logits 128256 x 4 B = 513024 B; 32 MiB per captured size
    assert cuda_graph_bytes(m, ()) == 0
    assert cuda_graph_bytes(m, (1,)) == CUDA_GRAPH_FIXED_BYTES + 86016 + 513024
    assert cuda_graph_bytes(m, (1, 2, 4)) == 3 * CUDA_GRAPH_FIXED_BYTES + 7 * (86016 + 513024)
    assert cuda_graph_bytes(m, (8,), tp=2) < cuda_graph_bytes(m, (8,))  # q/k/v, MLP split
