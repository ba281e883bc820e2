"""A phase whose process dies, on the real server: no stream waits, readiness tells the truth,
and the deployment heals itself without a server restart (docs/serve.md).

The reference deployment is started the operator's way, ``pdtrt serve SPEC --detach``
(supervised by its own process). Streams decode through the router when the decode model's
Python-backend stub is SIGKILLed, as an OOM kill would: Triton 2.51 would leave those streams
open forever and keep answering every later request with "Stub process 'decode_0_0' is not
healthy", while ``/v2/health/ready`` says 200.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from conftest import EXAMPLES
from e2e_client import engine_inputs, ensemble_inputs, generate, metric, wait_for
from supervised_server import (
    kill_model,
    readiness,
    restarted_after_abort,
    serve_detached,
    server_pid,
    stop,
)

from pdtrt.serve.procs import process_running

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = "The keeper lit the lamp on the rock"
NUM_STREAMS = 6
# A SIGKILLed stub can abort the whole Triton 2.51 server (docs/design/serve.md, "owner-dead
# mutex"); the supervisor then restarts it: the reference deployment is back within this
RESTART_S = 120.0
WEDGE = "wedge-"


@pytest.fixture(scope="module")
def served(reference_engines, tmp_path_factory):
    root, _dep = reference_engines
    work = tmp_path_factory.mktemp("self-healing")
    # a request whose id starts with "wedge-" blocks the router's event loop for good
    info = serve_detached(EXAMPLES / "reference-cpu.yaml", root, work,
                          env={"PDTRT_FAULT_INJECTION": f"event_loop:router:{WEDGE}"})
    try:  # first requests: the server must be up before phases are killed under it
        for _ in range(2):
            generate(info["endpoints"]["grpc"], "ensemble", ensemble_inputs(PROMPT, 4))
        # Triton 2.51 once aborted a moment after its first responses (the owner-dead mutex,
        # docs/design/serve.md, seen 2026-12-06): then the supervisor restarts it
        time.sleep(1)
        assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200,
                        timeout_s=RESTART_S)
    except BaseException:
        stop(work)
        raise
    yield info, work
    stop(work)


def _no_eos() -> grpcclient.InferInput:
    end = grpcclient.InferInput("end_id", [1, 1], "INT32")
    end.set_data_from_numpy(np.array([[-1]], dtype=np.int32))
    return end


def test_readiness_is_the_health_model_and_it_is_ready(served):
    info, _work = served
    assert info["readiness"].endswith("/v2/models/health/ready") and info["ready"]
    assert readiness(info["endpoints"]["http"]) == 200


def test_a_killed_decode_process_ends_its_streams_says_not_ready_and_heals(served):
    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    metrics_url = info["endpoints"]["metrics"]
    repository = work / "repo"
    expected = generate(url, "ensemble", ensemble_inputs(PROMPT, 12)).texts
    assert expected == generate(url, "ensemble_aggregated", ensemble_inputs(PROMPT, 12)).texts

    ended: dict[int, tuple[float, object]] = {}

    def stream(i: int) -> None:
        got = generate(url, "router", engine_inputs([1, 40 + i, 41, 42], 400, [_no_eos()]),
                       request_id=f"doomed-{i}", output="output_ids", timeout_s=60)
        ended[i] = (time.monotonic(), got)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(NUM_STREAMS)]
    for t in threads:
        t.start()
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode") == NUM_STREAMS, timeout_s=30)
    pid = server_pid(work)
    killed_at = time.monotonic()
    kill_model(repository, "decode")

    statuses: list[tuple[float, int]] = []  # readiness until it is back
    while time.monotonic() - killed_at < RESTART_S:
        statuses.append((time.monotonic() - killed_at, readiness(http)))
        if statuses[-1][1] == 200 and any(s != 200 for _t, s in statuses):
            break
        time.sleep(0.1)
    for t in threads:
        t.join(30)
    aborted = restarted_after_abort(work, pid)

    # Every stream in flight ended with a request error within 5 s, after some tokens.
    assert sorted(ended) == list(range(NUM_STREAMS))
    for i, (at, got) in ended.items():
        assert at - killed_at < 5.0, (i, at - killed_at)
        assert got.texts and not got.final_seen and got.error
        if not aborted:  # the router ended them (not the server's death)
            assert "stopped answering" in got.error and "is not healthy" in got.error, got.error
    # Readiness said so while no decode endpoint was healthy, soon after the kill.
    not_ready = [t for t, s in statuses if s != 200]
    assert not_ready and not_ready[0] < 5.0, statuses
    # Ready again -- within 30 s by a reload, or after a restart of the server -- and the same
    # greedy tokens as before.
    heal_s = RESTART_S if aborted else 30.0
    back = next(t for t, s in statuses if s == 200 and t > not_ready[0])
    assert back < heal_s, statuses
    assert wait_for(lambda: generate(url, "ensemble", ensemble_inputs(PROMPT, 12)).texts
                    == expected, timeout_s=max(1.0, heal_s - (time.monotonic() - killed_at)))
    if aborted:  # Triton 2.51 died of the kill: the supervisor restarted it on its ports
        assert "restarting it on the same ports" in (work / "supervisor.log").read_text()
        return
    os.kill(pid, 0)  # the server was never restarted
    assert server_pid(work) == pid
    assert "decode: reloaded" in (work / "supervisor.log").read_text()
    # The prefill side holds no KV for the streams that died.
    assert wait_for(lambda: metric(metrics_url, "pdtrt_kv_held_buffers", model="prefill") == 0)
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_stalled_calls_total",
                                   phase="decode") >= 1)


def test_a_phase_killed_again_heals_again(served):
    """Every kill heals, not just the first: Triton's ``load`` of a loaded model whose files
    did not change is a no-op (the first reload only worked because the stub's ``__pycache__``
    had appeared since the start), so the supervisor must force the reload."""
    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    repository = work / "repo"
    expected = generate(url, "ensemble_aggregated", ensemble_inputs(PROMPT, 12)).texts
    for phase in ("decode", "decode", "prefill"):
        assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
        pid = server_pid(work)
        killed_at = time.monotonic()
        kill_model(repository, phase)
        assert wait_for(lambda: readiness(http) != 200, timeout_s=10), phase
        healed = wait_for(lambda: readiness(http) == 200, timeout_s=30)
        if not healed and restarted_after_abort(work, pid):  # the server died of it
            healed = wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
        assert healed, (phase, "not healed")
        heal_s = RESTART_S if server_pid(work) != pid else 30.0
        assert wait_for(lambda: generate(url, "ensemble", ensemble_inputs(PROMPT, 12)).texts
                        == expected, timeout_s=max(1.0, heal_s - (time.monotonic() - killed_at)))
        # the same server, unless Triton 2.51 aborted on the kill and was restarted
        assert server_pid(work) == pid or restarted_after_abort(work, pid)


def test_bench_exits_with_its_report_when_the_router_dies_under_it(served, tmp_path):
    """Issue 24: the router's stub died mid-bench, the requests in flight through ``ensemble``
    never ended (Triton does not end them), and `pdtrt bench` wrote its report and then
    waited for good on tritonclient's reader threads. It must exit within its timeout plus a
    few seconds, with the report and a non-zero status."""
    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
    timeout_s = 8.0
    bench = subprocess.Popen(
        [str(Path(sys.executable).with_name("pdtrt")), "bench", "--url", url,
         "--concurrency", "4", "--duration", "10", "--warmup", "0", "--osl", "64",
         "--timeout", str(timeout_s), "--no-plots", "--output-dir", str(tmp_path), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        metrics_url = info["endpoints"]["metrics"]
        assert wait_for(lambda: metric(metrics_url, "pdtrt_router_requests_in_flight") >= 2
                        or bench.poll() is not None, timeout_s=30)
        assert bench.poll() is None, bench.communicate()  # requests stream through the router
        pid = server_pid(work)
        kill_model(work / "repo", "router")
        killed_at = time.monotonic()
        stdout, stderr = bench.communicate(timeout=3 * timeout_s + 30)
    except subprocess.TimeoutExpired:
        bench.kill()
        pytest.fail("pdtrt bench did not exit after the router died under its requests")
    # the requests lost with the router time out; later ones fail fast or succeed on the
    # reloaded router: the bench ends within a few timeouts, not never
    assert time.monotonic() - killed_at < 3 * timeout_s + 15
    report = json.loads(stdout)
    failures = report["runs"][0]["failures"]
    assert failures["num_failed"] >= 1, failures
    assert bench.returncode in (1, 2), stderr  # lost requests are not a success
    assert (tmp_path / "report.json").is_file()
    assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)  # and it healed
    if restarted_after_abort(work, pid):  # by a restart: the counters started again
        return  # (Triton 2.51 aborted when the router's stub was SIGKILLed, docs/design/serve.md)
    # the requests that died with it are counted, by the reloaded router
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_lost_to_reload_total") >= 1,
                    timeout_s=10)


def test_a_router_whose_event_loop_is_wedged_is_not_ready_then_reloaded(served):
    """The router's stub lives, but its event loop is blocked (an injected blocking call): its
    health probe, answered from that loop, goes unanswered, so readiness drops within one
    probe timeout and a supervisor round; the supervisor kills the hung stub, reloads the
    router, and the deployment serves again -- without a server restart."""
    from pdtrt.runtime.router.config import DEFAULT_PROBE_TIMEOUT_S
    from pdtrt.serve.supervisor import HUNG_ROUNDS, INTERVAL_S

    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: None)
    client.async_stream_infer("router", engine_inputs([1, 5, 6], 4), request_id=f"{WEDGE}1",
                              enable_empty_final_response=True)
    wedged_at = time.monotonic()
    try:
        deadline_s = DEFAULT_PROBE_TIMEOUT_S + 2 * INTERVAL_S + 1
        assert wait_for(lambda: readiness(http) != 200, timeout_s=deadline_s)
        assert time.monotonic() - wedged_at < deadline_s
        assert wait_for(lambda: readiness(http) == 200,
                        timeout_s=(HUNG_ROUNDS + 3) * (DEFAULT_PROBE_TIMEOUT_S + INTERVAL_S) + 30)
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
    log = (work / "supervisor.log").read_text()
    assert "router: alive but it has not answered its health probe" in log
    assert "router: reloaded" in log
    got = generate(url, "ensemble", ensemble_inputs(PROMPT, 4))
    assert got.error is None and got.final_seen


def test_a_server_that_aborts_is_restarted_on_its_ports_and_serves_again(served):
    """What the owner-dead mutex does to Triton 2.51 (docs/design/serve.md), on purpose: the server
    process dies with streams in flight (SIGKILL here: an abort would also leave a core file
    wherever core dumps are on). They end with an error within seconds,
    readiness is refused, and the supervisor starts the server again on the same ports; the
    state file names the new one, and it serves the same greedy tokens."""
    info, work = served
    url, http = info["endpoints"]["grpc"], info["endpoints"]["http"]
    assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
    expected = generate(url, "ensemble", ensemble_inputs(PROMPT, 12)).texts
    ended: dict[int, tuple[float, object]] = {}

    def stream(i: int) -> None:
        got = generate(url, "router", engine_inputs([1, 50 + i, 41, 42], 400, [_no_eos()]),
                       request_id=f"aborted-{i}", output="output_ids", timeout_s=60)
        ended[i] = (time.monotonic(), got)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    metrics_url = info["endpoints"]["metrics"]
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode") == 2, timeout_s=30)
    pid = server_pid(work)
    aborted_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(30)
    assert sorted(ended) == [0, 1]
    for at, got in ended.values():
        assert at - aborted_at < 5.0 and got.error and not got.final_seen
    assert wait_for(lambda: readiness(http) == 0, timeout_s=5)  # refused while it is down
    assert wait_for(lambda: readiness(http) == 200, timeout_s=RESTART_S)
    back_s = time.monotonic() - aborted_at
    assert server_pid(work) != pid and not process_running(pid)
    assert generate(url, "ensemble", ensemble_inputs(PROMPT, 12)).texts == expected
    log = (work / "supervisor.log").read_text()
    # "gone" when serve started it, "killed by SIGKILL" when the supervisor did (a restart
    # earlier in this module: Triton 2.51 aborted under the fixture's first requests once)
    assert re.search(rf"tritonserver \(pid {pid}\) (gone|killed by SIGKILL); restarting it "
                     "on the same ports", log), log
    assert list(work.glob("server.log.restart*"))  # the dead server's log, kept
    print(f"ready again {back_s:.1f} s after the abort")


def test_stop_ends_the_supervisor_with_the_server(served):
    info, work = served
    supervisor = info["state_file"]["supervisor_pid"]
    server = server_pid(work)  # restarted above: not the one serve started
    stop(work)
    assert wait_for(lambda: not process_running(server), timeout_s=10)
    assert not (work / "serve.json").exists()
    assert wait_for(lambda: not process_running(supervisor), timeout_s=10)
