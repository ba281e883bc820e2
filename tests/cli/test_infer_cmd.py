"""pdtrt infer against the real Triton server serving the fake_llm test fixture."""

from __future__ import annotations

import json
import re

from fake_llm_server import needs_triton

from pdtrt.serve.triton_server import free_port

pytestmark = needs_triton


def test_infer_streams_then_prints_timings(run, llm_server):
    result = run("infer", "hello there", "--url", llm_server, "--max-tokens", "3",
                 "--seed", "9", "--temperature", "0.7", "--top-k", "5", "--top-p", "0.9")
    assert result.exit_code == 0, result.output
    text, timings = result.stdout.splitlines()
    assert text == " w0_9 w1_9 w2_9"
    assert re.fullmatch(r"TTFT [\d.]+ ms, ITL mean [\d.]+ ms, max [\d.]+ ms, 3 responses, "
                        r"E2E [\d.]+ ms", timings)


def test_infer_json_no_stream(run, llm_server):
    result = run("infer", "hi", "--url", llm_server, "--model", "ensemble_aggregated",
                 "--no-stream", "--max-tokens", "2", "--timeout", "30", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["text"] == " w0_0 w1_0" and data["num_chunks"] == 1 and data["itl_ms"] == []
    assert data["model"] == "ensemble_aggregated" and data["error"] is None


def test_infer_stream_flag(run, llm_server):
    result = run("infer", "hi", "--url", llm_server, "--stream", "--max-tokens", "2", "--json")
    assert json.loads(result.stdout)["num_chunks"] == 2


def test_infer_errors(run, llm_server):
    result = run("infer", "hi", "--url", llm_server, "--model", "nope")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: the server at ") and "hint: models: " in result.stderr
    result = run("infer", " ", "--url", llm_server)
    assert result.exit_code == 2 and "text_input is empty" in result.stderr
    result = run("infer", "hi", "--url", f"127.0.0.1:{free_port()}", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == "ServerUnavailableError"


def test_the_timing_line_counts_tokens_when_responses_hold_several():
    from pdtrt.cli.infer import timing_line
    from pdtrt.client.types import Chunk, GenerateResult

    result = GenerateResult(request_id="r", model="ensemble", send_time_s=0.0, end_time_s=0.8,
                            chunks=(Chunk(text="a", time_s=0.1),
                                    Chunk(text="b c d", time_s=0.4, num_tokens=3),
                                    Chunk(text="e f g h", time_s=0.8, num_tokens=4)))
    assert timing_line(result) == ("TTFT 100.0 ms, ITL mean 100.0 ms, max 100.0 ms, "
                                   "3 responses (8 tokens), E2E 800.0 ms")
