"""Chaos on the real server: no request lost to a phase that dies, stalls or loses its KV
transfer, and a clear end -- never a hang -- when the router itself dies (docs/migration.md).

``docs/examples/reference-cpu-pools.yaml`` served the operator's way (``pdtrt serve --detach``):
two prefill and two decode endpoints on one server, started with KV-transfer faults armed
(:mod:`pdtrt.runtime.faults`) for request ids the fault-free runs never use. Each case streams
eight greedy requests and checks each against its fault-free output (one burst, the module's):

- a decode endpoint's stub SIGKILLed mid-stream: its streams are migrated to the other decode;
- a transfer's completion notice dropped (TensorRT-LLM #17665): the decode gives up its pull at
  ``kv_transfer.timeout_s``, the router retries, the prefill frees the KV at the same timeout;
- a prefill endpoint's stub killed during the KV transfer: the decodes' pulls fail, the router
  retries on the other prefill;
- a decode endpoint's stub SIGSTOPped (a stall): the liveness deadline fires, its streams are
  migrated, the endpoint is ejected and, once it answers again, re-admitted;
- the router's stub SIGKILLed: every client's request ends with an error at its deadline
  (Triton 2.51 never ends a dead router's streams), and the deployment heals.

No case leaves a stub fault in the kernel log, and the survivors let go of every KV they held.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

import pytest
from conftest import EXAMPLES
from e2e_client import Stream, ensemble_inputs, generate, metric, wait_for
from supervised_server import (
    kernel_log,
    kill_model,
    readiness,
    restarted_after_abort,
    serve_detached,
    server_pid,
    stop,
    stub_faults,
    stubs_of,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]

NUM_STREAMS = 8
MAX_TOKENS = 200  # long enough that decode_b is mid-stream when killed, short enough to be quick
PROMPTS = [f"Migration chaos stream {i} asks about item {i * 13}" for i in range(NUM_STREAMS)]
ENDPOINTS = ("prefill", "prefill_b", "decode", "decode_b")
KV_KILL, KV_DROP = "kvkill-", "kvdrop-"  # request ids the armed KV-transfer faults hit
HEAL_S = 120.0  # a reload, or a Triton 2.51 abort and the supervisor's restart


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("migration")
    engines = tmp_path_factory.mktemp("pool-engines")  # serve builds the tiny engines
    faults = f"kv_done:prefill:{KV_DROP},kv_transfer:prefill_b:{KV_KILL}"
    info = serve_detached(EXAMPLES / "reference-cpu-pools.yaml", engines, work,
                          env={"PDTRT_FAULT_INJECTION": faults})
    yield info, work
    stop(work)


@pytest.fixture(scope="module")
def expected(served) -> dict[int, str]:
    """Each prompt's fault-free output, streamed the same way."""
    info, _work = served
    results, threads = _burst(info["endpoints"]["grpc"], "clean")
    for t in threads:
        t.join(120)
    assert all(r.error is None and r.final_seen for r in results.values())
    return {i: "".join(r.texts) for i, r in results.items()}


@pytest.fixture
def case(served):
    """Each case starts with every endpoint healthy, and leaves no stub fault in the kernel
    log (its stubs: those alive before and after it)."""
    info, work = served
    metrics_url = info["endpoints"]["metrics"]
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200, timeout_s=HEAL_S)
    assert wait_for(lambda: all(metric(metrics_url, "pdtrt_router_endpoint_healthy",
                                       endpoint=e) == 1 for e in ENDPOINTS), timeout_s=HEAL_S)
    log, pids = kernel_log(), set(stubs_of(work / "repo"))
    yield info, work
    faults = stub_faults(log, pids | set(stubs_of(work / "repo")))
    assert not faults, faults


def _burst(url: str, tag: str, timeout_s: float = 60
           ) -> tuple[dict[int, object], list[threading.Thread]]:
    """Every prompt streamed at once: (results by index, filled as each ends; the threads)."""
    results: dict[int, object] = {}

    def one(i: int) -> None:
        try:
            results[i] = generate(url, "ensemble", ensemble_inputs(PROMPTS[i], MAX_TOKENS),
                                  request_id=f"{tag}{i}", timeout_s=timeout_s)
        except queue.Empty:  # the client's deadline: no response for timeout_s
            results[i] = Stream(error=f"no response within {timeout_s:g} s")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(NUM_STREAMS)]
    for t in threads:
        t.start()
    return results, threads


def _all_identical(results: dict[int, object], expected: dict[int, str],
                   threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(NUM_STREAMS))
    for i, got in sorted(results.items()):
        assert got.error is None and got.final_seen, (i, got.error)
        assert "".join(got.texts) == expected[i], i  # each token once, none lost


def _kv_let_go(metrics_url: str, models=("prefill", "prefill_b")) -> bool:
    """The prefills hold no KV for a decode (pulled, or expired at kv_transfer.timeout_s)."""
    return wait_for(lambda: sum(metric(metrics_url, "pdtrt_kv_held_buffers", model=m)
                                for m in models) == 0, timeout_s=20)


def _count(metrics_url: str, name: str, **labels: str) -> float:
    return metric(metrics_url, name, **labels)


def test_a_decode_endpoint_killed_mid_stream_loses_no_request(case, expected):
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    before = _count(metrics_url, "pdtrt_router_migrations_total", phase="decode")
    results, threads = _burst(url, "chaos")
    # decode_b holds streams that have started: kill it under them once their tokens flow
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode_b") >= 2, timeout_s=30)
    time.sleep(1.0)  # tokens of decode_b reached the clients: a migration, not a retry
    kill_model(work / "repo", "decode_b")
    _all_identical(results, expected, threads)
    assert _count(metrics_url, "pdtrt_router_migrations_total", phase="decode") > before
    # a request's histograms are observed after its final response went out: wait for them
    assert wait_for(lambda: metric(metrics_url, "pdtrt_request_migration_seconds_count") >= 1,
                    timeout_s=20)
    assert _kv_let_go(metrics_url)
    log = (work / "server.log").read_text()
    assert "migrating it (died)" in log or "migrating it (stalled)" in log


def test_a_dropped_kv_completion_notice_hangs_nothing(case, expected):
    """TensorRT-LLM #17665's case: one transfer's "done" never arrives. The decode gives up
    its pull at kv_transfer.timeout_s (5 s here), the router retries the request (a fresh
    prefill, the other decode), and the prefill frees the KV nobody confirmed at the same
    timeout."""
    info, _work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    retries = _count(metrics_url, "pdtrt_router_retries_total", phase="decode")
    expired = sum(_count(metrics_url, "pdtrt_kv_expired_total", model=m)
                  for m in ("prefill", "prefill_b"))
    started = time.monotonic()
    results, threads = _burst(url, KV_DROP)
    _all_identical(results, expected, threads)
    assert time.monotonic() - started < 40  # nothing hung
    assert _count(metrics_url, "pdtrt_router_retries_total", phase="decode") >= retries + 1
    assert wait_for(lambda: sum(_count(metrics_url, "pdtrt_kv_expired_total", model=m)
                                for m in ("prefill", "prefill_b")) >= expired + 1, timeout_s=20)
    assert _kv_let_go(metrics_url)


def test_a_prefill_killed_during_the_kv_transfer_loses_no_request(case, expected):
    """prefill_b SIGKILLs itself the moment a decode asks for a held KV: that pull (and any
    other of its KV) fails, and each request is retried on the other prefill."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    victim = stubs_of(work / "repo", "prefill_b")
    retries = _count(metrics_url, "pdtrt_router_retries_total", phase="decode")
    started = time.monotonic()
    results, threads = _burst(url, KV_KILL)
    _all_identical(results, expected, threads)
    assert time.monotonic() - started < 40
    # it died mid-transfer (a reaped stub, or a zombie, has no command line of a stub)
    assert wait_for(lambda: not set(victim) & set(stubs_of(work / "repo", "prefill_b")))
    assert _count(metrics_url, "pdtrt_router_retries_total", phase="decode") >= retries + 1
    assert _kv_let_go(metrics_url, ("prefill",))  # the survivor
    assert "KV transfer failed" in (work / "server.log").read_text()


def test_a_stalled_decode_endpoint_is_ejected_its_streams_migrated(case, expected):
    """SIGSTOP, not a death: decode_b's stub stops answering with streams in flight. The
    liveness deadline fires, its probe goes unanswered, the streams are migrated; once the
    stub runs again (SIGCONT, or the supervisor's reload of a model that never answers) the
    endpoint is re-admitted."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    server = server_pid(work)
    stalled = _count(metrics_url, "pdtrt_router_migrations_total", phase="decode",
                     reason="stalled")
    ejections = _count(metrics_url, "pdtrt_router_endpoint_ejections_total",
                       endpoint="decode_b")
    readmissions = _count(metrics_url, "pdtrt_router_endpoint_readmissions_total",
                          endpoint="decode_b")
    results, threads = _burst(url, "stall")
    assert wait_for(lambda: metric(metrics_url, "pdtrt_engine_active_sequences",
                                   model="decode_b") >= 2, timeout_s=30)
    time.sleep(1.0)
    pids = stubs_of(work / "repo", "decode_b")
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        _all_identical(results, expected, threads)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # the supervisor killed it to reload the model
                pass
    assert _count(metrics_url, "pdtrt_router_migrations_total", phase="decode",
                  reason="stalled") > stalled
    assert _count(metrics_url, "pdtrt_router_endpoint_ejections_total",
                  endpoint="decode_b") > ejections
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200, timeout_s=HEAL_S)
    if restarted_after_abort(work, server):  # Triton 2.51 aborted when the stub was killed
        return  # (docs/design/serve.md, "owner-dead mutex"): its counters started again
    assert wait_for(lambda: _count(metrics_url, "pdtrt_router_endpoint_readmissions_total",
                                   endpoint="decode_b") > readmissions, timeout_s=HEAL_S)
    assert _kv_let_go(metrics_url)


def test_a_killed_router_ends_every_stream_with_an_error_and_heals(case, expected):
    """No migration can save a dead router's requests (it holds their streams), and Triton 2.51
    never ends them: each client's request ends with its deadline's error -- never a hang --
    and the supervisor reloads the router."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    pid = server_pid(work)
    deadline_s = 10.0
    results, threads = _burst(url, "router-dies", timeout_s=deadline_s)
    assert wait_for(lambda: metric(metrics_url, "pdtrt_router_requests_in_flight") >= 4,
                    timeout_s=30)
    kill_model(work / "repo", "router")
    killed = time.monotonic()
    for t in threads:
        t.join(deadline_s + 30)
    assert not any(t.is_alive() for t in threads)  # no client hangs
    assert time.monotonic() - killed < deadline_s + 15
    assert sorted(results) == list(range(NUM_STREAMS))
    assert any(got.error is not None for got in results.values()), "no stream was cut"
    # a stream either completed before the kill, identical, or ended with an error
    for i, got in results.items():
        assert got.error is not None or "".join(got.texts) == expected[i], i
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200, timeout_s=HEAL_S)
    again = generate(url, "ensemble", ensemble_inputs(PROMPTS[0], MAX_TOKENS),
                     request_id="after-router", timeout_s=60)
    assert again.error is None and "".join(again.texts) == expected[0]
    if not restarted_after_abort(work, pid):  # the same server: the reloaded router counts
        assert wait_for(lambda: metric(metrics_url, "pdtrt_router_lost_to_reload_total") >= 1,
                        timeout_s=10)
