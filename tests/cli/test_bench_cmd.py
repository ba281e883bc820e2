"""pdtrt bench against the real Triton server serving the fake_llm test fixture."""

from __future__ import annotations

import json

from fake_llm_server import needs_triton

from pdtrt.serve.triton_server import free_port

pytestmark = needs_triton

SMALL = ("--osl", "4", "--isl", "8", "--warmup", "1")


def test_compare_open_loop_json_writes_every_file(run, llm_server, tmp_path):
    out = tmp_path / "out"
    result = run("bench", "--url", llm_server, "--compare", "--rate", "30", "--requests", "8",
                 "--arrival", "constant", "--seed", "3", *SMALL, "--output-dir", str(out),
                 "--spec", "pdtrt/data/specs/reference-cpu.yaml", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["model"] for r in data["runs"]] == ["ensemble", "ensemble_aggregated"]
    for r in data["runs"]:
        s = r["summary"]
        assert s["num_ok"] == 8 and s["output_tokens"] == s["requested_tokens"] == 32
        assert s["slo"] == {"percentile": 90, "ttft_ms": 200.0, "itl_ms": 50.0}
        assert s["cost_per_hour_usd"] is not None
    assert data["config"]["arrival_process"] == "constant" and data["config"]["seed"] == 3
    names = sorted(p.name for p in out.iterdir())
    assert names == ["itl_cdf.png", "records-ensemble-rate30.csv",
                     "records-ensemble_aggregated-rate30.csv", "report.json",
                     "token_timeline.png", "ttft_cdf.png"]
    assert json.loads((out / "report.json").read_text())["runs"] == data["runs"]


def test_closed_loop_table(run, llm_server, tmp_path):
    result = run("bench", "--url", llm_server, "--model", "ensemble_aggregated",
                 "--concurrency", "3", "--requests", "6", *SMALL, "--slo-ttft-ms", "5000",
                 "--slo-itl-ms", "5000", "--slo-percentile", "99", "--timeout", "30",
                 "--stream", "--no-plots", "--output-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    row = {line.split("│")[1].strip(): line.split("│")[2].strip()
           for line in lines if line.startswith("│")}
    assert row["requests ok"] == "6" and row["errors"] == "0"
    assert row["output tokens (counted)"] == row["output tokens (requested)"] == "24"
    assert row["SLO attainment (need 99%)"] == "100%"
    assert "ensemble_aggregated @ concurrency 3" in result.stdout
    assert lines[-2].startswith("report: ") and lines[-1].endswith(".csv")


def test_sweep_reports_the_highest_rate(run, llm_server, tmp_path):
    result = run("bench", "--url", llm_server, "--rates", "10,20", "--duration", "0.3",
                 *SMALL, "--slo-ttft-ms", "10000", "--plots", "--output-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "ensemble: highest rate meeting the SLOs (p90: TTFT <= 10000.0 ms, TPOT <= - ms): " \
           "20 requests/s" in result.stdout
    assert (tmp_path / "sweep.png").exists()


def test_dataset_and_no_stream(run, llm_server, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "one two", "max_tokens": 3}\n{"prompt": "three"}\n')
    result = run("bench", "--url", llm_server, "--dataset", str(data), "--requests", "4",
                 "--osl", "2", "--no-stream", "--no-plots", "--output-dir", str(tmp_path),
                 "--json")
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)["runs"][0]["summary"]
    assert s["num_ok"] == 4 and s["output_tokens"] == 4  # one response per request
    assert s["requested_tokens"] == 3 + 2 + 3 + 2 and s["input_tokens"] == 2 + 1 + 2 + 1


def test_bench_errors(run, llm_server, tmp_path):
    out = ("--output-dir", str(tmp_path))
    result = run("bench", "--url", llm_server, "--model", "nope", "--requests", "1", *out)
    assert result.exit_code == 2 and "no ready model 'nope'" in result.stderr
    result = run("bench", "--url", f"127.0.0.1:{free_port()}", "--requests", "1", *out,
                 "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == "ServerUnavailableError"
    result = run("bench", "--url", llm_server, "--rate", "1", "--rates", "1,2", *out)
    assert result.exit_code == 2 and "not both" in result.stderr
    result = run("bench", "--url", llm_server, "--rate", "1", "--concurrency", "2", *out)
    assert result.exit_code == 2 and "not both" in result.stderr
    result = run("bench", "--url", llm_server, "--isl", "uniform:9:1", *out)
    assert result.exit_code == 2 and result.stderr.startswith("error: --isl: length")
    result = run("bench", "--url", llm_server, "--rates", "1,x", *out)
    assert result.exit_code == 2 and "comma-separated" in result.stderr
    # fake_llm declares no end_id: --ignore-eos cannot be honoured, so it is refused
    result = run("bench", "--url", llm_server, "--requests", "1", "--warmup", "0",
                 "--ignore-eos", *out)
    assert result.exit_code == 2 and "has no input 'end_id'" in result.stderr


def test_bench_without_a_tokenizer_says_lengths_are_approximate(run, llm_server, tmp_path):
    result = run("bench", "--url", llm_server, "--requests", "2", *SMALL, "--no-plots",
                 "--output-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        "note: input lengths are approximate (words, not tokens): the server names no "
        "tokenizer_dir for ensemble; pass --tokenizer DIR with a copy of the deployment's "
        "tokenizer")


def test_bench_whose_every_request_times_out_exits_2(run, llm_server, tmp_path):
    result = run("bench", "--url", llm_server, "--requests", "2", *SMALL, "--no-plots",
                 "--timeout", "0.001", "--output-dir", str(tmp_path))
    assert result.exit_code == 2
    assert "error: every request of ensemble @ concurrency 1 failed; most common error " \
           "(timeout, 2 of 2)" in result.stderr
    assert (tmp_path / "report.json").is_file()  # the report is still written
