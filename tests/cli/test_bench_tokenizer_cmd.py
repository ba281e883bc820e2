"""pdtrt bench --tokenizer against the real reference deployment (its own tokenizer)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers", reason="needs transformers (pdtrt[reference])")


@pytest.mark.triton
def test_bench_sends_exact_token_lengths_to_the_reference_server(run, reference_server,
                                                                 reference_engines, tmp_path):
    """128 words exceed the tiny tokenizer's max_input_len (every request was rejected);
    128 of its tokens fit, and every request is accounted for in tokens."""
    server, _prepared = reference_server
    root, dep = reference_engines
    out = tmp_path / "out"
    result = run("bench", "--url", server.endpoints.grpc_url, "--concurrency", "2",
                 "--requests", "6", "--warmup", "0", "--isl", "128", "--osl", "8",
                 "--no-plots", "--output-dir", str(out),
                 "--tokenizer", str(root / dep.spec.name / "tokenizer"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    s = data["runs"][0]["summary"]
    assert s["num_ok"] == 6 and s["num_errors"] == 0
    assert data["config"]["input_length_unit"].startswith("tokens (")
    csv = next(out.glob("records-*.csv")).read_text().splitlines()
    column = csv[0].split(",").index("input_tokens")
    assert [int(row.split(",")[column]) for row in csv[1:]] == [128] * 6


def test_a_missing_tokenizer_is_exit_2_before_any_request(run, tmp_path):
    result = run("bench", "--url", "127.0.0.1:1", "--requests", "1",
                 "--tokenizer", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert "the tokenizer directory" in result.stderr and "does not exist" in result.stderr


@pytest.mark.triton
def test_bench_with_defaults_uses_the_tokenizer_the_server_names(run, reference_server,
                                                                  reference_engines, tmp_path):
    """No --spec, no --tokenizer: the preprocessing model's tokenizer_dir (read from the
    server's model config) exists here, so lengths are its tokens and both paths complete."""
    server, _prepared = reference_server
    root, dep = reference_engines
    result = run("bench", "--url", server.endpoints.grpc_url, "--compare", "--rate", "20",
                 "--requests", "4", "--warmup", "0", "--osl", "4", "--no-plots",
                 "--output-dir", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tokenizer"] == {"origin": "server", "note": None,
                                 "path": str(root / dep.spec.name / "tokenizer")}
    assert [r["model"] for r in data["runs"]] == ["ensemble", "ensemble_aggregated"]
    assert [r["summary"]["num_ok"] for r in data["runs"]] == [4, 4]
    assert data["config"]["input_length_unit"].startswith("tokens (")
    assert "error" not in data


@pytest.mark.triton
def test_bench_reports_partial_failures_and_fails_when_all_do(run, reference_server,
                                                             tmp_path):
    """Prompts of 200..600 tokens against max_input_len 384: some are refused, and the
    console says how many and why, and exit 1; prompts of 1000 tokens: every one is, and
    exit 2."""
    url = reference_server[0].endpoints.grpc_url
    common = ("--url", url, "--warmup", "0", "--osl", "2", "--no-plots",
              "--output-dir", str(tmp_path))
    some = run("bench", *common, "--concurrency", "4", "--requests", "8",
               "--isl", "uniform:200:600")
    assert some.exit_code == 1, some.output
    line = next(x for x in some.stdout.splitlines() if "requests failed" in x)
    assert line.startswith("ensemble @ concurrency 4: ") and "of 8 requests failed (request " \
        in line and "most common: " in line
    assert some.stderr.startswith("warning: requests failed -- ensemble @ concurrency 4: ")
    every = run("bench", *common, "--requests", "3", "--isl", "1000")
    assert every.exit_code == 2
    assert "error: every request of ensemble @ concurrency 1 failed; most common error " \
           "(request, 3 of 3): " in every.stderr
    assert "hint: the server refused the requests" in every.stderr
    as_json = run("bench", *common, "--requests", "2", "--isl", "1000", "--json")
    assert as_json.exit_code == 2
    data = json.loads(as_json.stdout)  # one JSON document: the report, with its error
    assert data["error"]["error"] == "BenchError" and data["runs"][0]["failures"][
        "num_failed"] == 2


@pytest.mark.triton
def test_bench_prints_the_routers_breakdown_of_the_measured_requests(run, reference_server,
                                                                     tmp_path):
    """--metrics-url: each run's requests as the router saw them, warm-up excluded (its counts
    are exactly the measured requests'); a model that bypasses the router says so."""
    server, _prepared = reference_server
    args = ("bench", "--url", server.endpoints.grpc_url, "--compare", "--concurrency", "2",
            "--requests", "5", "--warmup", "2", "--isl", "12", "--osl", "6", "--no-plots",
            "--metrics-url", server.endpoints.metrics_url, "--output-dir", str(tmp_path))
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    disagg, aggregated = json.loads(result.stdout)["runs"]
    server_side = {f["family"].removeprefix("pdtrt_request_"): f
                   for f in disagg["server"]["families"]}
    assert list(server_side)[:4] == ["queue_seconds", "prefill_seconds",
                                     "kv_transfer_seconds", "decode_seconds"]
    summary = disagg["summary"]
    for every in ("queue_seconds", "prefill_seconds", "e2e_seconds", "input_tokens"):
        assert server_side[every]["count"] == 5, every  # not the warm-up's 2 more
    assert server_side["input_tokens"]["mean"] == 12
    out = server_side["output_tokens"]
    # greedy may end a prompt at its first token (the end id): tokens as the client counted
    assert out["count"] == 5 and round(out["mean"] * 5) == summary["output_tokens"]
    assert server_side["ttft_seconds"]["count"] == summary["ttft_ms"]["count"]
    client_ttft_ms = disagg["summary"]["ttft_ms"]["mean"]
    # the router's TTFT is inside the client's (the ensemble's pre/postprocessing and gRPC)
    assert 0 < server_side["ttft_seconds"]["mean"] * 1e3 < client_ttft_ms
    assert aggregated["server"]["families"] == []
    assert "does not pass through pdtrt's router" in aggregated["server"]["note"]
    text = run(*(a if a != "--compare" else "--no-plots" for a in args))
    assert text.exit_code == 0, text.output
    assert "server side, ensemble @ concurrency 2" in text.stdout
    row = next(line for line in text.stdout.splitlines() if "kv_transfer (ms)" in line)
    assert row.split("│")[2].strip() in {"4", "5"}


def test_an_unreachable_metrics_url_fails_before_any_request(run, llm_server, tmp_path):
    result = run("bench", "--url", llm_server, "--requests", "1", "--no-plots",
                 "--metrics-url", "http://127.0.0.1:9/metrics", "--output-dir", str(tmp_path))
    assert result.exit_code == 2, result.output
    assert "cannot scrape http://127.0.0.1:9/metrics" in result.stderr
    assert not list(tmp_path.iterdir())
