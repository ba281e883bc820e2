"""pdtrt bench --compare against the real reference deployment: the disaggregated ensemble
answers the server timing, and every request's five phases sum to its server-side TTFT."""

from __future__ import annotations

import csv
import json

import pytest

from pdtrt.bench.records import SERVER_TIMING_FIELDS
from pdtrt.client.timing import TTFT_PHASE_FIELDS


@pytest.mark.triton
def test_bench_compare_writes_the_ttft_phases_that_sum_to_the_servers_ttft(
        run, reference_server, tmp_path):
    url = reference_server[0].endpoints.grpc_url
    result = run("bench", "--url", url, "--compare", "--rate", "10", "--requests", "5",
                 "--warmup", "0", "--isl", "16", "--osl", "4", "--output-dir", str(tmp_path),
                 "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    disagg, agg = data["runs"]
    assert disagg["summary"]["num_ok"] == 5 and agg["summary"]["num_ok"] == 5
    phases = disagg["summary"]["ttft_phases_ms"]
    assert set(phases) == set(SERVER_TIMING_FIELDS) and phases["server_ttft_ms"]["count"] == 5
    assert "ttft_phases_ms" not in agg["summary"]  # the aggregated ensemble is not asked
    assert (tmp_path / "ttft_phases.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    with (tmp_path / "records-ensemble-rate10.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 5
    for row in rows:
        ttft_ms = float(row["server_ttft_ms"])
        parts_ms = sum(float(row[name]) for name in TTFT_PHASE_FIELDS)
        assert abs(parts_ms - ttft_ms) <= max(0.05 * ttft_ms, 1.0), row
        assert 0 < ttft_ms <= float(row["ttft_ms"]), row  # the server's is inside the client's
        assert row["server_path"], row
    with (tmp_path / "records-ensemble_aggregated-rate10.csv").open(newline="") as f:
        assert all(row["server_ttft_ms"] == "" for row in csv.DictReader(f))
