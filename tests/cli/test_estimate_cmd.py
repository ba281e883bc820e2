"""pdtrt estimate: JSON keys, text output, every option, errors."""

from __future__ import annotations

import json

import pytest

M8B = "meta-llama/Meta-Llama-3.1-8B"
BASE = ("estimate", "--model", M8B, "--gpu", "h100-sxm", "--isl", "3000", "--osl", "500")


def test_json_has_the_required_keys(run):
    result = run(*BASE, "--rate", "2", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for key in ("ttft_ms", "tpot_ms", "output_tok_per_s", "req_per_s", "ttft_p90_ms",
                "tpot_p90_ms", "memory_per_gpu"):
        assert key in data
    assert data["req_per_s"] == 2.0 and data["output_tok_per_s"] == 1000.0
    assert data["ttft_ms"] > 0 and data["tpot_ms"] > 0 and data["stable"] is True


def test_closed_loop_text(run):
    result = run(*BASE, "--concurrency", "32", "--tp", "2", "--weights", "fp8", "--kv-dtype",
                 "fp8", "--max-batch-size", "64", "--max-num-tokens", "4096",
                 "--backend", "trtllm")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "agg 1x h100-sxm TP2  (ISL 3000, OSL 500, 32 concurrent clients)"
    assert lines[1].startswith("  clients arrive in bursts of ")
    assert lines[2].startswith("  TTFT  mean ")
    assert any(line.startswith("  memory per GPU (aggregated): weights ") for line in lines)


def test_disaggregated_all_options(run, tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-sxm: 2.0\nl40s: 1.0\n")
    result = run(*BASE, "--rate", "3", "--mode", "disaggregated", "--decode-gpu", "l40s",
                 "--decode-tp", "1", "--prefill-instances", "1", "--decode-instances", "2",
                 "--prices", str(prices), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"] == "disagg 1x h100-sxm TP1 + 2x l40s TP1"
    assert data["cost_per_hour_usd"] == 4.0
    assert data["kv_transfer_ms"] > 0
    same = json.loads(run(*BASE, "--rate", "3", "--mode", "disaggregated", "--decode-gpu",
                          "h100-sxm", "--same-node", "--json").stdout)
    assert same["kv_transfer_ms"] < data["kv_transfer_ms"]  # NVLink, not PCIe Gen4


def test_factors_file(run, tmp_path):
    factors = tmp_path / "f.yaml"
    factors.write_text("backends:\n  trtllm:\n    factors: {gemm_eff: 0.1, attention_eff: 0.1, "
                       "bandwidth_eff: 0.1, step_overhead_s: 0.001, allreduce_latency_s: 0}\n")
    slow = json.loads(run(*BASE, "--rate", "0.2", "--factors", str(factors), "--json").stdout)
    fast = json.loads(run(*BASE, "--rate", "0.2", "--json").stdout)
    assert slow["tpot_ms"] > 3 * fast["tpot_ms"]


def test_unstable_rate_is_reported(run):
    result = run(*BASE, "--rate", "500")
    assert result.exit_code == 0
    assert "UNSTABLE" in result.stdout and "TTFT  mean unstable" in result.stdout


@pytest.mark.parametrize("args,message", [
    (("--rate", "1", "--concurrency", "2"), "exactly one of --concurrency or --rate"),
    (("--rate", "1", "--mode", "disaggregated"), "needs --decode-gpu"),
    (("--rate", "1", "--gpu", "h100x"), "unknown GPU 'h100x'"),
], ids=["both-loads", "no-decode-gpu", "bad-gpu"])
def test_errors(run, args, message):
    result = run(*BASE, *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_client_overhead_is_reported_apart(run):
    bare = json.loads(run(*BASE, "--rate", "1", "--json").stdout)
    result = run(*BASE, "--rate", "1", "--client-overhead-ms", "25", "--json")
    data = json.loads(result.stdout)
    assert data["client_overhead_ms"] == 25.0 and bare["client_overhead_ms"] == 0.0
    assert data["engine_ttft_ms"] == bare["ttft_ms"]
    assert data["ttft_ms"] == pytest.approx(bare["ttft_ms"] + 25.0, abs=1e-3)
    text = run(*BASE, "--rate", "1", "--client-overhead-ms", "25").stdout
    assert "+ client overhead 25.0 ms)" in text.splitlines()[1]


def test_closed_loop_burst_and_error_band(run):
    args = ("estimate", "--model", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--tp", "2",
            "--weights", "fp8", "--kv-dtype", "fp8", "--isl", "2048", "--osl", "256",
            "--concurrency", "16")
    default = json.loads(run(*args, "--json").stdout)
    independent = json.loads(run(*args, "--burst", "1", "--json").stdout)
    assert default["burst"] > 1 and independent["burst"] == 1
    assert independent["ttft_ms"] < default["ttft_ms"]  # burst-mates prefill first
    band = default["error_band"]
    assert band["regime"] == "tp 2, clients 8-16" and band["caveat"] is None
    lines = run(*args).stdout.splitlines()
    assert lines[1].startswith("  clients arrive in bursts of ")
    assert any(line.startswith("  expected error (held-out, tp 2, clients 8-16): TTFT ±")
               for line in lines)


def test_kv_bound_and_capacity_policy(run):
    args = ("estimate", "--model", "Qwen/Qwen3-32B", "--gpu", "h100-sxm", "--weights", "fp8",
            "--kv-dtype", "fp8", "--isl", "4096", "--osl", "4096", "--concurrency", "128")
    strict = json.loads(run(*args, "--json").stdout)
    assert any(x.startswith("KV-bound: 128 clients") for x in strict["limits"])
    loose = json.loads(run(*args, "--capacity-policy", "max-utilization", "--json").stdout)
    assert loose["req_per_s"] > strict["req_per_s"]  # reserves the live tokens, not the max
    assert strict["ttft_ms"] is not None  # bounded: waiting clients queue, nothing diverges


def test_borrowed_efficiencies_are_noted(run):
    result = run("estimate", "--model", M8B, "--gpu", "l4", "--isl", "500", "--osl", "100",
                 "--rate", "0.5")
    assert result.exit_code == 0, result.output
    assert ("  note: l4: no kernel measurements; using l40s's efficiencies (same architecture, "
            "sm 8.9) on l4's own datasheet peaks") in result.stdout.splitlines()
