"""pdtrt model-info."""

from __future__ import annotations

import json

from conftest import models_dir

LLAMA = str(models_dir() / "meta-llama--Meta-Llama-3.1-8B.json")


def test_done_criterion_json_and_plain_agree(run):
    result = run("model-info", LLAMA, "--gpu", "l40s", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["weight_bytes"] == 16_060_522_496
    assert data["kv_bytes_per_token"] == 131_072
    fit = data["fits"][0]
    assert (fit["gpu"], fit["tp"], fit["seq_len"]) == ("l40s", 1, 2560)
    assert fit["max_concurrent_seqs"] == 83
    plain = run("model-info", LLAMA, "--gpu", "l40s").stdout.splitlines()
    assert "weight bytes (bf16, weights none): 16,060,522,496 (14.96 GiB)" in plain
    assert "KV bytes per token (bf16, TP1): 131,072" in plain
    assert "  max concurrent sequences: 83" in plain
    assert "  KV bytes per token per rank: 131,072" in plain


def test_exact_header(run):
    lines = run("model-info", "meta-llama/Meta-Llama-3.1-8B").stdout.splitlines()
    assert lines[:3] == [
        "model: meta-llama/Meta-Llama-3.1-8B (llama, 32 layers, hidden 4096, 32 heads / 8 KV "
        "heads, head dim 128)",
        "parameters: 8,030,261,248",
        "weight bytes (bf16, weights none): 16,060,522,496 (14.96 GiB)",
    ]
    assert lines[-1] == "valid TP: 1, 2, 4, 8"  # no --gpu: no fit section


def test_options_change_the_numbers(run):
    result = run("model-info", "meta-llama/Meta-Llama-3.1-70B", "--gpu", "h100-sxm", "--tp", "2",
                 "--isl", "3000", "--osl", "500", "--dtype", "bf16", "--weights", "fp8",
                 "--kv-dtype", "fp8", "--max-num-tokens", "4096", "--tokens-per-block", "64",
                 "--kv-fraction", "0.8", "--json")
    fit = json.loads(result.stdout)["fits"][0]
    assert (fit["tp"], fit["seq_len"], fit["tokens_per_block"]) == (2, 3500, 64)
    assert fit["kv_bytes_per_token"] == 80 * 4 * 2 * 128 * 1
    assert fit["kv_cache_fraction"] == 0.8
    assert fit["blocks_per_seq"] == 55  # ceil(3500 / 64)


def test_smallest_tp_chosen(run):
    data = json.loads(run("model-info", "meta-llama/Meta-Llama-3.1-70B", "--gpu", "l40s",
                          "--gpu", "h100", "--isl", "3000", "--osl", "500", "--json").stdout)
    assert [(f["gpu"], f["tp"]) for f in data["fits"]] == [("l40s", 4), ("h100-sxm", 2)]


def test_bad_tp_is_exit_2(run):
    result = run("model-info", "meta-llama/Meta-Llama-3.1-8B", "--tp", "3")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: TP 3 does not divide the 8 KV heads")
    assert "hint: valid TP for meta-llama/Meta-Llama-3.1-8B: [1, 2, 4, 8]" in result.stderr


def test_unknown_gpu_and_model(run):
    result = run("model-info", "meta-llama/Meta-Llama-3.1-8B", "--gpu", "h1000")
    assert result.exit_code == 2 and "unknown GPU 'h1000'" in result.stderr
    result = run("model-info", "mistralai/Mixtral-8x7B-v0.1", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == "UnsupportedModelError"


def test_does_not_fit_anywhere(run):
    result = run("model-info", "meta-llama/Meta-Llama-3.1-405B", "--gpu", "l4")
    assert result.exit_code == 2
    assert "does not fit on l4 even at TP 8" in result.stderr


def test_list(run):
    names = run("model-info", "--list").stdout.splitlines()
    assert "pdtrt/tiny-llama" in names
    assert json.loads(run("model-info", "--list", "--json").stdout) == names


def test_missing_model_is_usage_error(run):
    result = run("model-info")
    assert result.exit_code == 2 and "give MODEL" in result.stderr


def test_debug_keeps_traceback(run):
    result = run("--debug", "model-info", "no/such-model")
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "ModelConfigError"
