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
