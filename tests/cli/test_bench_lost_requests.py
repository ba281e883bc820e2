"""`pdtrt bench` exits once its work is done, even when the server never ends some requests
(issue 24: after a router stub died, the bench wrote its report and then waited for good on
tritonclient's reader threads, which wait on requests nobody will answer)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm_server import MODELS, needs_triton

from pdtrt.serve.triton_server import ServerConfig, TritonServer

pytestmark = [*needs_triton, pytest.mark.slow]


@pytest.fixture
def stalled_server(tmp_path):
    """fake_llm as ``ensemble``, one token a minute: a request that, for the client, never
    ends."""
    model = tmp_path / "repo" / "ensemble"
    shutil.copytree(MODELS / "fake_llm", model)
    config = model / "config.pbtxt"
    config.write_text(config.read_text().replace('string_value: "2"', 'string_value: "60000"'))
    server = TritonServer(ServerConfig(repository=tmp_path / "repo",
                                       log_path=tmp_path / "server.log"))
    endpoints = server.start(timeout_s=90)
    yield endpoints.grpc_url
    server.stop(grace_s=5)


def test_bench_exits_with_its_report_when_the_server_never_ends_its_requests(stalled_server,
                                                                            tmp_path):
    timeout_s = 2.0
    started = time.monotonic()
    bench = subprocess.run(
        [str(Path(sys.executable).with_name("pdtrt")), "bench", "--url", stalled_server,
         "--concurrency", "2", "--requests", "2", "--warmup", "0", "--osl", "100",
         "--timeout", str(timeout_s), "--no-plots", "--output-dir", str(tmp_path / "out"),
         "--json"], capture_output=True, text=True, timeout=120)
    took_s = time.monotonic() - started
    assert took_s < timeout_s + 20, took_s  # start-up, the timeout, a few seconds: not never
    assert bench.returncode == 2, bench.stderr  # every request failed
    failures = json.loads(bench.stdout)["runs"][0]["failures"]
    assert failures["num_failed"] == 2 and failures["by_kind"] == {"timeout": 2}
    assert (tmp_path / "out" / "report.json").is_file()
