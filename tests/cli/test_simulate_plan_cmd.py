"""pdtrt simulate and pdtrt plan: side-by-side output, JSON, plots only when asked, the spec."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import EXAMPLES

from pdtrt.enums import Phase
from pdtrt.spec.load import load_deployment

SEED = str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
M8B = "meta-llama/Meta-Llama-3.1-8B"
FAST = ("--num-requests", "60")
DIST_KEYS = {"count", "mean", "p50", "p90", "p95", "p99", "min", "max"}


def test_simulate_side_by_side_with_plot(run, tmp_path):
    png = tmp_path / "sim.png"
    result = run("simulate", SEED, *FAST, "--plot", str(png))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == ("llama3-8b-h100-l40s-trtllm-0.21: ISL 3000, OSL 500, 2 req/s poisson, "
                        "60 requests, seed 0")
    header = next(line for line in lines if "metric" in line)
    assert "agg 3x h100-sxm TP1" in header and "disagg 1x h100-sxm TP1 + 2x l40s TP1" in header
    for row in ("TTFT p90 / p99", "ITL p50 / p90", "SLO attainment (need 90%)", "SLO met",
                "$ per M output tok"):
        assert any(row in line for line in lines), row
    assert lines[-1] == f"wrote {png}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_and_plan_write_no_plot_unless_asked(run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("simulate", SEED, *FAST, "--mode", "aggregated")
    assert result.exit_code == 0, result.output
    assert not result.stdout.splitlines()[-1].startswith("wrote")
    result = run(*PLAN, "--max-gpus", "2")
    assert result.exit_code == 0, result.output
    assert "wrote" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no PNG, nothing else either


def test_simulate_json_deterministic_and_overrides(run):
    args = ("simulate", SEED, *FAST, "--mode", "disaggregated", "--rate", "3", "--arrival",
            "constant", "--isl", "uniform:1400:2600", "--osl", "normal:200:40", "--seed", "5",
            "--prefill-instances", "2", "--decode-instances", "3", "--routing", "round-robin",
            "--backend", "trtllm", "--json")
    a, b = run(*args), run(*args)
    assert a.exit_code == 0, a.output
    da = json.loads(a.stdout)
    assert da == json.loads(b.stdout)
    (res,) = da["results"]
    assert res["label"] == "disagg 2x h100-sxm TP1 + 3x l40s TP1" and res["seed"] == 5
    assert res["mode"] == "disaggregated"
    assert da["plot"] is None and res["num_unfinished"] == 0
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        assert set(res[key]) == DIST_KEYS and res[key]["count"] > 0
    assert set(res["utilisation"]) == {"prefill", "decode", "kv_link"}
    assert set(res["slo"]) >= {"percentile", "ttft_ms", "itl_ms", "attainment", "met",
                               "num_good", "backlog_growing", "goodput_req_per_s"}
    other = run(*args[:-1], "--seed", "6", "--json")
    assert json.loads(other.stdout)["results"][0]["ttft_ms"] != res["ttft_ms"]


def test_simulate_shared_prefix_reports_cached_prompt_tokens(run):
    args = ("simulate", SEED, *FAST, "--mode", "aggregated", "--rate", "4")
    plain = run(*args, "--json")
    cached = run(*args, "--shared-prefix", "2048", "--json")
    assert plain.exit_code == 0 and cached.exit_code == 0, cached.output
    (p,), (c,) = json.loads(plain.stdout)["results"], json.loads(cached.stdout)["results"]
    assert "cached_prompt_tokens" not in p
    assert c["cached_prompt_tokens"] == 2048 * c["num_measured"] == \
        c["prompt_tokens"] * 2048 // 3000
    assert c["ttft_ms"]["p50"] < 0.7 * p["ttft_ms"]["p50"]
    table = run(*args, "--shared-prefix", "2048")
    assert any("prompt tokens from cache" in line for line in table.stdout.splitlines())
    bad = run(*args, "--shared-prefix", "-1")
    assert bad.exit_code == 2 and "--shared-prefix" in bad.stderr


def test_simulate_closed_loop_trace_and_policies(run, tmp_path):
    result = run("simulate", SEED, *FAST, "--mode", "aggregated", "--concurrency", "8",
                 "--agg-instances", "1", "--batch-policy", "whole-prompt", "--json")
    assert result.exit_code == 0, result.output
    (res,) = json.loads(result.stdout)["results"]
    assert res["label"] == "agg 1x h100-sxm TP1" and res["num_unfinished"] == 0
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,isl,osl\n0.0,1000,20\n0.5,3000,40\n1.0,500,10\n")
    factors = tmp_path / "f.yaml"
    factors.write_text("backends:\n  trtllm:\n    factors: {gemm_eff: 0.5, attention_eff: 0.5, "
                       "bandwidth_eff: 0.8, step_overhead_s: 0.0003, allreduce_latency_s: 0}\n")
    result = run("simulate", SEED, "--trace", str(trace), "--factors", str(factors), "--json")
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert [r["num_requests"] for r in results] == [3, 3]
    # a JSONL trace with a rate: its lengths, cycled, on the generator's schedule
    jsonl = tmp_path / "trace.jsonl"
    jsonl.write_text('{"isl": 1000, "osl": 20}\n{"prompt": "a b c", "max_tokens": 5}\n')
    result = run("simulate", SEED, "--trace", str(jsonl), "--rate", "1", "--num-requests",
                 "10", "--mode", "aggregated")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == ("llama3-8b-h100-l40s-trtllm-0.21: lengths from a "
                                             "trace of 2, 1 req/s poisson, 10 requests, seed 0")


def test_simulate_errors(run, tmp_path):
    result = run("simulate", SEED, "--rate", "1", "--concurrency", "2")
    assert result.exit_code == 2 and "at most one of --rate and --concurrency" in result.stderr
    result = run("simulate", SEED, "--isl", "uniform:9:3")
    assert result.exit_code == 2 and "need 1 <= LOW <= HIGH" in result.stderr
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"isl": 3, "arival_s": 1}\n')
    result = run("simulate", SEED, "--trace", str(bad))
    assert result.exit_code == 2 and "t.jsonl:1: unknown field 'arival_s'" in result.stderr
    result = run("simulate", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2 and "no such file" in result.stderr


PLAN = ("plan", "--model", M8B, "--gpus", "h100-sxm,l40s", "--isl", "3000", "--osl", "500",
        "--rate", "2", "--ttft-p90", "1000", "--itl-p90", "30", "--num-requests", "100")


def test_plan_writes_a_valid_spec_table_and_pareto(run, tmp_path):
    spec, png = tmp_path / "pdtrt.yaml", tmp_path / "pareto.png"
    result = run(*PLAN, "--max-gpus", "6", "--output", str(spec), "--plot", str(png),
                 "--top", "3")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.splitlines()[0] == (f"{M8B}: ISL 3000, OSL 500, 2 req/s, SLO p90 TTFT 1000 ms / "
                                   "TPOT 30 ms; GPUs h100-sxm, l40s")
    assert "verdict: " in out and f"wrote {png}" in out and f"wrote {spec} (disagg " in out
    dep = load_deployment(spec)  # what `pdtrt spec validate` accepts
    assert dep.spec.target.value == "trtllm-1.2" and dep.spec.workload.osl == 500
    if dep.gpus[Phase.PREFILL].key != dep.gpus[Phase.DECODE].key:  # one server per GPU type
        assert dep.spec.decode.endpoint == f"{dep.gpus[Phase.DECODE].key}-host:8001"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_plan_json(run, tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100-sxm: 2.5\nl40s: 1.0\n")
    result = run(*PLAN, "--budget", "12", "--prices", str(prices), "--weights", "bf16",
                 "--kv-dtype", "fp8", "--backend", "trtllm", "--seed", "1", "--same-node",
                 "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["num_candidates"] >= data["num_screened"] >= data["num_simulated"] > 0
    assert data["plot"] is None and data["spec"] is None and data["spec_config"] is None
    assert data["slo"] == {"percentile": 90, "ttft_ms": 1000.0, "itl_ms": 30.0}
    assert data["ranked"]
    for c in data["ranked"]:
        assert c["meets_slo"] and c["cost_per_hour_usd"] <= 12 and c["slo_attainment"] >= 0.9
        assert c["ttft_ms_at_slo"] <= 1000 and c["tpot_ms_at_slo"] <= 30
    assert data["chosen"] == data["ranked"][0]


def test_plan_errors(run):
    result = run(*PLAN, "--max-gpus", "2", "--budget", "5")
    assert result.exit_code == 2 and "at most one of --max-gpus and --budget" in result.stderr
    result = run(*PLAN, "--gpus", "h100x")
    assert result.exit_code == 2 and "unknown GPU 'h100x'" in result.stderr


def test_simulate_conversations_kv_aware_and_local_prefill(run):
    """Short prompts (the seed decode engine's max_num_tokens is 512: a longer prompt is never
    prefilled locally): follow-ups of 50 new tokens go to the decode side that holds them."""
    args = ("simulate", SEED, *FAST, "--mode", "disaggregated", "--rate", "2", "--isl", "200",
            "--osl", "50", "--turns", "3", "--think-s", "1.5", "--followup-isl", "50",
            "--routing", "kv_aware")
    remote = run(*args, "--json")
    local = run(*args, "--max-local-prefill-tokens", "128", "--json")
    assert remote.exit_code == 0 and local.exit_code == 0, local.output
    (r,), (lo,) = json.loads(remote.stdout)["results"], json.loads(local.stdout)["results"]
    assert r["reuse"]["num_local_prefills"] == 0 < lo["reuse"]["num_local_prefills"]
    assert lo["reuse"]["kv_transfer_bytes"] < r["reuse"]["kv_transfer_bytes"]
    assert set(lo["reuse"]) == {"computed_prompt_tokens", "kv_transfer_bytes",
                                "num_local_prefills", "num_local_queued", "num_remote_prefills",
                                "ttft_first_turn_ms", "ttft_later_turns_ms"}
    assert lo["prompt_tokens"] - lo["cached_prompt_tokens"] == \
        lo["reuse"]["computed_prompt_tokens"]
    table = run(*args, "--max-local-prefill-tokens", "128")
    assert "conversations of 3 turns, think 1.5 s" in table.stdout
    for row in ("prompt tokens computed", "prefills local / remote", "TTFT p50 / p90, turn 1",
                "TTFT p50 / p90, later turns", "KV transferred"):
        assert row in table.stdout, row
    bad = run("simulate", SEED, *FAST, "--think-s", "2")
    assert bad.exit_code != 0 and "more than one turn" in bad.output
    assert run("simulate", SEED, "--turns", "0").exit_code == 2


def dep_label(dep) -> str:
    """The planner's label of a loaded spec's disaggregated configuration."""
    from pdtrt.perf.configs import serving_from_deployment

    return serving_from_deployment(dep).label()


def test_plan_a_chat_workload(run, tmp_path):
    """--shared-prefix / --turns / --think-s / --followup-isl: planned with block reuse and
    kv_aware routing, compared with least_load, the spec serving what was simulated."""
    spec = tmp_path / "chat.yaml"
    args = ("plan", "--model", M8B, "--gpus", "h100-sxm,l40s", "--isl", "1200", "--osl", "100",
            "--shared-prefix", "1000", "--turns", "3", "--think-s", "1", "--followup-isl", "80",
            "--rate", "6", "--ttft-p90", "500", "--itl-p90", "30", "--max-gpus", "4")
    result = run(*args, "-o", str(spec))
    assert result.exit_code == 0, result.output
    assert "KV-aware routing on " in result.stdout and "with least_load (" in result.stdout
    assert "conditional disaggregation on disagg " in result.stdout
    dep = load_deployment(spec)
    assert dep.spec.router.routing.value == "kv_aware"
    assert dep.spec.decode.engine.enable_block_reuse
    assert dep.spec.prefill.engine.max_input_len == 1200 + 2 * (100 + 80)
    data = json.loads(run(*args, "--json").stdout)
    # the header's simulate command reproduces the plan's run of the spec's configuration
    (line,) = [x for x in spec.read_text().splitlines() if "simulate it as planned" in x]
    argv = line.split("THIS_FILE ")[1].split(" (its --rate")[0].split()
    again = json.loads(run("simulate", str(spec), *argv, "--json").stdout)["results"][0]
    (planned,) = [c["simulation"] for c in data["ranked"] if c["config"] == dep_label(dep)]
    assert again["goodput_req_per_s"] == pytest.approx(planned["goodput_req_per_s"], rel=0.01)
    assert again["reuse"]["computed_prompt_tokens"] == pytest.approx(
        planned["reuse"]["computed_prompt_tokens"], rel=0.01)
    kv, least = data["routing"]["runs"]["kv_aware"], data["routing"]["runs"]["least_load"]
    assert kv["prompt_tokens"] == pytest.approx(least["prompt_tokens"], rel=0.01)
    assert kv["prompt_tokens"] > kv["computed_prompt_tokens"]
    assert data["local_prefill"]["chosen"] == 0 and data["local_prefill"]["runs"] == {}
    bad = run(*args[:-2], "--shared-prefix", "1300")
    assert bad.exit_code == 2 and "not within the first turn's prompt of 1200" in bad.stderr
    bad = run("plan", "--model", M8B, "--gpus", "l40s", "--isl", "100", "--osl", "10",
              "--rate", "1", "--ttft-p90", "500", "--itl-p90", "50", "--think-s", "2")
    assert bad.exit_code == 2 and "more than one turn" in bad.stderr


def test_simulate_takes_the_router_settings_from_the_spec(run, tmp_path):
    """routing / max_local_prefill_tokens / max_prefill_queue_depth: the spec's router section
    unless a flag overrides it; --max-prefill-queue-depth sends prompts local while the one
    prefill instance is queued."""
    spec = yaml.safe_load(open(SEED).read())
    spec["router"] = {**spec.get("router", {}), "routing": "kv_aware",
                      "max_prefill_queue_depth": 2}
    path = tmp_path / "queued.yaml"
    path.write_text(yaml.safe_dump(spec))
    args = ("simulate", str(path), *FAST, "--mode", "disaggregated", "--rate", "12", "--isl",
            "400", "--osl", "40")
    from_spec = json.loads(run(*args, "--json").stdout)["results"][0]
    assert from_spec["reuse"]["num_local_queued"] == from_spec["reuse"]["num_local_prefills"] > 0
    off = json.loads(run(*args, "--max-prefill-queue-depth", "0", "--routing", "least_load",
                         "--json").stdout)["results"][0]
    assert "reuse" not in off  # least_load, nothing conditional: no reuse block
    table = run(*args)
    assert "local as the prefill pool was queued)" in table.stdout


def test_simulate_capacity_policy(run):
    # one L40S decode instance and long answers: the KV cache bounds the batch, so
    # max-utilization runs more requests at once than guaranteed-no-evict (and pauses some)
    args = ("simulate", SEED, "--num-requests", "100", "--mode", "disaggregated",
            "--concurrency", "100", "--isl", "3000", "--osl", "3000", "--decode-instances",
            "1", "--json")
    out = {}
    for policy in ("guaranteed-no-evict", "max-utilization"):
        result = run(*args, "--capacity-policy", policy)
        assert result.exit_code == 0, result.output
        (res,) = json.loads(result.stdout)["results"]
        assert res["num_unfinished"] == 0
        out[policy] = res
    assert out["max-utilization"]["tpot_ms"] != out["guaranteed-no-evict"]["tpot_ms"]
    bad = run(*args, "--capacity-policy", "static")
    assert bad.exit_code != 0 and "static" in bad.output


def test_plan_from_owned_cards(run):
    owned = ("plan", "--model", M8B, "--have", "l40s:4", "--gpus", "h100-sxm",
             "--power-price", "0.15", "--max-gpus", "h100-sxm:2,l40s:4", "--isl", "3000",
             "--osl", "500", "--rate", "2", "--ttft-p90", "1000", "--itl-p90", "30",
             "--num-requests", "80")
    result = run(*owned)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].endswith("GPUs l40s, h100-sxm")
    cards = next(line for line in lines if line.startswith("cards: "))
    assert "l40s (" in cards and "owned" in cards and "per million output tokens" in cards
    assert any(line.startswith("without the owned cards: ") for line in lines)
    data = json.loads(run(*owned, "--json").stdout)
    assert data["owned"]["usd_per_mtok"] < data["owned"]["rented_usd_per_mtok"]
    assert data["chosen"]["fleet"]["cost_per_hour_usd"] == data["chosen"]["cost_per_hour_usd"]


def test_plan_owned_card_errors(run):
    result = run(*PLAN, "--have", "l40s:8")
    assert result.exit_code == 2 and "--have needs --power-price" in result.stderr
    result = run(*PLAN, "--have", "l40:8", "--power-price", "0.1")
    assert result.exit_code == 2 and "did you mean" in result.stderr
    result = run(*PLAN, "--max-gpus", "h100-sxm:two")
    assert result.exit_code == 2 and "must be a whole number, got 'two'" in result.stderr
