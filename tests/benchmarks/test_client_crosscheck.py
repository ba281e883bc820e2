"""benchmarks/client_crosscheck.py: pdtrt bench beside aiperf and genai-perf.

The parsing and the comparison run on a recorded pair (tests/fixtures/clients/, see its
README: pdtrt bench and aiperf against the SmolLM2 deployment); the script's flags and its
refusal without a client are checked without a server; aiperf runs for real in one test that
skips, saying why, where its venv is absent (a test never installs it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.conftest import load_script
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "clients"
SCRIPT = ROOT / "benchmarks" / "client_crosscheck.py"
results = load_script("_client_results")


def _server(name: str):
    before = results.scrape_totals((FIXTURES / f"{name}-metrics-before.txt").read_text())
    after = results.scrape_totals((FIXTURES / f"{name}-metrics-after.txt").read_text())
    return results.server_counts(before, after)


def test_scrapes_sum_every_label_set_and_differ():
    text = ('pdtrt_request_output_tokens_count{model="router",version="1"} 3\n'
            'pdtrt_request_output_tokens_count{model="router_b",version="1"} 2\n'
            'pdtrt_request_output_tokens_sum{model="router"} 160\n'
            "# HELP pdtrt_request_input_tokens_sum not a sample\n"
            "pdtrt_request_input_tokens_sum 640\n"
            'pdtrt_request_ttft_seconds_sum{model="router"} 0.25\n'
            'pdtrt_request_ttft_seconds_count{model="router"} 5\n')
    totals = results.scrape_totals(text)
    assert totals == {"requests": 5.0, "output_tokens": 160.0, "input_tokens": 640.0,
                      "ttft_s": 0.25}
    counts = results.server_counts(dict.fromkeys(totals, 0.0), totals)
    assert counts.output_per_request == 32.0 and counts.input_per_request == 128.0
    assert counts.ttft_mean_ms == pytest.approx(50.0)


def test_server_counts_correct_a_client_that_counts_other_tokens():
    run = results.ClientRun(client="genai-perf", num_ok=10, num_errors=0, ttft_p50_ms=20.0,
                            ttft_mean_ms=21.0, itl_mean_ms=10.0, e2e_mean_ms=331.0,
                            output_tok_per_s=410.0, request_per_s=10.0,
                            input_tokens_mean=128.0, output_tokens_mean=41.0,
                            server=results.ServerCounts(requests=12, output_tokens=12 * 32,
                                                        input_tokens=12 * 128, ttft_s=0.24))
    # 32 engine tokens per request: 10 req/s -> 320 tok/s; the gaps were 310 ms / 31
    assert run.on_server_counts() == {"output_tok_per_s": 320.0,
                                      "itl_mean_ms": pytest.approx(10.0 * 40 / 31)}
    bare = results.ClientRun(**{**run.__dict__, "server": None})
    assert bare.on_server_counts() == {"output_tok_per_s": None, "itl_mean_ms": None}


def test_a_recorded_aiperf_pair_side_by_side():
    """pdtrt bench and aiperf, back to back on SmolLM2 (the fixtures' README)."""
    pdtrt = results.read_pdtrt(FIXTURES / "aiperf-pdtrt-report.json", _server("aiperf-pdtrt"))
    other = results.read_profile_export(FIXTURES / "aiperf-profile_export_aiperf.json",
                                        "aiperf", num_sent=40, server=_server("aiperf-client"))
    # the recorded load: 40 requests, 128 prompt tokens, 32 output tokens, on both sides
    assert pdtrt.num_ok == other.num_ok == 40 and other.num_errors == 0
    assert (pdtrt.input_tokens_mean, pdtrt.output_tokens_mean) == (128, 32)
    assert (other.input_tokens_mean, other.output_tokens_mean) == (128, 32)  # server usage
    assert other.ttft_p50_ms == pytest.approx(1339.241546)
    assert pdtrt.ttft_p50_ms == pytest.approx(1144.6, abs=0.05)
    for run in (pdtrt, other):
        # every request ran to 32 tokens (end_id -1 / ignore_eos), warm-ups included
        assert run.server.requests == 44 and run.server.output_per_request == 32
        assert run.server.input_per_request == 128
        assert run.on_server_counts()["output_tok_per_s"] == pytest.approx(
            run.request_per_s * 32)
    pair = results.Pair(index=1, pdtrt=pdtrt, other=other)
    ratios = pair.ratios()
    assert ratios["ttft_p50_ms"] == pytest.approx(1339.241546 / pdtrt.ttft_p50_ms)
    assert ratios["output_tok_per_s"] == pytest.approx(other.request_per_s / pdtrt.request_per_s)
    assert pair.within() is False  # this pair was not: docs/bench.md says why
    table = results.markdown([pair]).splitlines()
    assert table[0] == results.HEADER and len(table) == 4
    assert table[2].startswith("| 1 | pdtrt bench | 40/40 | 1144.6 | ")
    assert table[3].startswith("| 1 | aiperf | 40/40 | 1339.2 | ")
    assert table[3].endswith(" | 1.170, 0.824 (NOT within 10 %) |")
    data = json.loads(json.dumps(results.summary([pair])))
    assert data["pairs"][0]["other"]["server"]["output_per_request"] == 32
    assert data["all_within_10_percent"] is False


def test_a_genai_perf_export_without_request_counts_counts_what_was_sent(tmp_path):
    """genai-perf 0.0.16's summary has no request_count (perf_analyzer fails a run with an
    error), so the requests sent are the requests that succeeded."""
    export = tmp_path / "profile_export_genai_perf.json"
    metric = {"unit": "ms", "avg": 20.0, "p50": 19.0, "p90": 30.0}
    export.write_text(json.dumps({
        "time_to_first_token": metric, "inter_token_latency": {**metric, "avg": 5.0},
        "request_latency": {**metric, "avg": 180.0},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 400.0},
        "request_throughput": {"unit": "requests/sec", "avg": 12.5},
        "input_sequence_length": {"unit": "tokens", "avg": 128.0},
        "output_sequence_length": {"unit": "tokens", "avg": 33.0}}))
    run = results.read_profile_export(export, "genai-perf", num_sent=40)
    assert (run.num_ok, run.num_errors, run.ttft_p50_ms, run.itl_mean_ms) == (40, 0, 19.0, 5.0)
    assert run.output_tokens_mean == 33.0 and run.server is None


def _script(*args: str, env: dict[str, str] | None = None, timeout_s: float = 60):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          timeout=timeout_s, cwd=ROOT)


def test_help_and_flags_refused_before_anything_runs():
    out = _script("--help")
    assert out.returncode == 0 and "--clients" in out.stdout and "Exit status" in out.stdout
    out = _script("--grpc-url", "127.0.0.1:1")
    assert out.returncode == 2 and "needs all of --grpc-url, --openai-url" in out.stderr
    out = _script("--clients", "locust")
    assert out.returncode == 2 and "--clients: choose from aiperf, genai-perf" in out.stderr
    out = _script("--server-cpus", "0", "--client-cpus", "0")
    assert out.returncode == 2 and "share CPU(s) 0" in out.stderr
    out = _script("--client-cpus", "100000")
    assert out.returncode == 2 and "CPUs this machine gives are" in out.stderr
    out = _script("--clients", "genai-perf", "--warmup", "1", "--concurrency", "2")
    assert out.returncode == 2 and "give --warmup 0 or at least 2" in out.stderr


def test_a_missing_client_stops_it_before_a_server_starts(tmp_path):
    out = _script("--clients", "genai-perf", env={"GP_VENV": str(tmp_path / "none"),
                                                  "GP_INSTALL": "0"})
    assert out.returncode == 3 and "genai-perf is not installed" in out.stderr
    assert "work folder" not in out.stderr  # it stopped before starting anything


def _venv(var: str, default: str, exe: str) -> Path | None:
    venv = Path(os.environ.get(var, default))
    return venv if (venv / "bin" / exe).is_file() else None


_CLIENTS = {"aiperf": ("AIPERF_VENV", "/tmp/pdtrt-aiperf-venv", "aiperf", "AIPERF_INSTALL"),
            "genai-perf": ("GP_VENV", "/tmp/pdtrt-genai-perf-venv", "genai-perf",
                           "GP_INSTALL")}


@pytest.mark.triton
@pytest.mark.slow
@pytest.mark.parametrize("client", list(_CLIENTS))
def test_a_client_for_real_against_the_reference_deployment(tmp_path, client):
    """Each client for real on the tiny reference deployment, a few requests: aiperf against
    the OpenAI front, genai-perf against ``ensemble`` -- whose perf_analyzer reads every
    declared output of every response; a response lacking one made it read garbage, which
    failed the run only when a value happened to be a NaN, so the deterministic checks of
    ensemble.PASSED_OUTPUTS are tests/test_engine_io.py and tests/runtime/
    test_postprocessing.py, and this one shows the real client completes. genai-perf's run is
    pinned apart from the server where the machine has two CPUs (``--server-cpus`` /
    ``--client-cpus``)."""
    from pdtrt.facts.embedded_triton import find_embedded_triton

    var, default, exe, install = _CLIENTS[client]
    if find_embedded_triton() is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton)")
    if _venv(var, default, exe) is None:
        pytest.skip(f"{client} is not installed in its venv ({var}, default {default}; run "
                    "benchmarks/client_crosscheck.py once to install it -- tests never "
                    "download)")
    spec = str(ROOT / "docs/examples/reference-cpu.yaml")
    cpus = sorted(os.sched_getaffinity(0))
    pin = ("--server-cpus", str(cpus[0]), "--client-cpus", str(cpus[1])) \
        if client == "genai-perf" and len(cpus) >= 2 else ()
    out = _script("--clients", client, "--spec", spec, "--engines-dir",
                  str(tmp_path / "engines"), "--pairs", "1", "--requests", "4", "--warmup", "2",
                  "--isl", "16", "--osl", "8", "--concurrency", "2", "--out", str(tmp_path),
                  *pin, env={install: "0"}, timeout_s=1500)
    assert out.returncode == 0, out.stderr[-4000:]
    data = json.loads((tmp_path / "crosscheck.json").read_text())
    [pair] = data["clients"][client]["pairs"]
    assert pair["pdtrt"]["num_ok"] == pair["other"]["num_ok"] == 4
    assert pair["other"]["server"]["output_per_request"] == 8  # every token, no end token
    assert pair["other"]["server"]["input_per_request"] == pytest.approx(16, abs=1)
    assert f"| 1 | {client} | 4/4 |" in (tmp_path / "crosscheck.md").read_text()
    if pin:
        assert data["load"]["server_cpus"] == str(cpus[0])
