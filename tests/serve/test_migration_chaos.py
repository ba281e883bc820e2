"""Chaos on the real server: no request lost to a phase that dies, stalls or loses its KV
transfer, and a clear end -- never a hang -- when the router itself dies (docs/migration.md).

``docs/examples/reference-cpu-pools.yaml`` served the operator's way (``pdtrt serve --detach``):
two prefill and two decode endpoints on one server, started with KV-transfer faults armed
(:mod:`pdtrt.runtime.faults`) for request ids the fault-free runs never use. Each case streams
eight greedy requests at once and checks each against its fault-free output (a fresh burst when
its streams all ended before the fault could catch them in flight):

- a transfer's completion notice dropped (TensorRT-LLM #17665): the decode gives up its pull at
  ``kv_transfer.timeout_s``, the router retries, the prefill frees the KV at the same timeout;
- a prefill endpoint's stub killed during the KV transfer: the decodes' pulls fail, the router
  retries on the other prefill;
- a decode endpoint's stub SIGKILLed mid-stream (its streams' decode tokens reached their
  clients): its streams are migrated to the other decode;
- a decode endpoint's stub SIGSTOPped (a stall): the liveness deadline fires, the endpoint is
  ejected and its streams migrated; SIGCONTed, it is reloaded (or re-admitted);
- the router's stub SIGKILLed: every client's request ends with an error at its deadline
  (Triton 2.51 never ends a dead router's streams), and the deployment heals.

No case leaves a stub fault in the kernel log, and the survivors let go of every KV they held.
Where Triton 2.51 itself dies of a killed or stopped stub (the owner-dead mutex,
docs/design/serve.md), it takes the streams with it: the case xfails then, naming the crash.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from dataclasses import dataclass

import pytest
from conftest import EXAMPLES
from e2e_client import Stream, ensemble_inputs, generate, metric, wait_for
from supervised_server import (
    TRITON_ABORT,
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
SERVE_S = 480.0  # ready within: nine models' stubs took 3.5 min to load on a loaded machine
HEAL_S = 180.0  # a reload, or a Triton 2.51 abort and the supervisor's restart (minutes on a
# loaded machine: a start of this server took 1.5-3 min beside other servers on 2 cores)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    work = tmp_path_factory.mktemp("migration")
    engines = tmp_path_factory.mktemp("pool-engines")  # serve builds the tiny engines
    faults = f"kv_done:prefill:{KV_DROP},kv_transfer:prefill_b:{KV_KILL}"
    info = serve_detached(EXAMPLES / "reference-cpu-pools.yaml", engines, work,
                          env={"PDTRT_FAULT_INJECTION": faults}, timeout_s=SERVE_S)
    yield info, work
    stop(work)


@pytest.fixture(scope="module")
def expected(served) -> dict[int, str]:
    """Each prompt's fault-free output, streamed the same way."""
    info, _work = served
    burst = _burst(info["endpoints"]["grpc"], "clean")
    burst.join()
    assert all(r.error is None and r.final_seen for r in burst.results.values())
    return {i: "".join(r.texts) for i, r in burst.results.items()}


@pytest.fixture
def case(served):
    """Each case starts with every endpoint healthy, and leaves no stub fault in the kernel
    log (its stubs: those alive before and after it)."""
    info, work = served
    metrics_url = info["endpoints"]["metrics"]

    def healthy() -> dict[str, float]:  # {} while the server is down (being restarted)
        try:
            return {e: metric(metrics_url, "pdtrt_router_endpoint_healthy", endpoint=e)
                    for e in ENDPOINTS}
        except OSError:
            return {}
    # together: a server that a stub's death in the case before takes down (seen: the stall
    # case's stub, run again, aborting Triton after that case had passed) may still have
    # answered the readiness probe
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200
                    and set(healthy().values()) == {1}, timeout_s=HEAL_S), healthy()
    log, pids = kernel_log(), set(stubs_of(work / "repo"))
    yield info, work
    faults = stub_faults(log, pids | set(stubs_of(work / "repo")))
    assert not faults, faults


@dataclass
class Burst:
    """Every prompt streamed at once, one thread each."""

    results: dict[int, Stream]  # by prompt index, filled as each stream ends
    threads: list[threading.Thread]
    received: list[int]  # responses with a token each client has had so far

    def mid_decode(self) -> bool:
        """Every stream has ended or had tokens of its decode reach its client (beyond the
        first, the prefill's): a decode failing now must migrate them, not retry them."""
        return all(i in self.results or n > 2 for i, n in enumerate(self.received))

    def join(self, timeout_s: float = 120) -> None:
        for t in self.threads:
            t.join(timeout_s)


def _burst(url: str, tag: str, timeout_s: float = 60) -> Burst:
    burst = Burst({}, [], [0] * NUM_STREAMS)

    def one(i: int) -> None:
        def seen(n: int) -> None:
            burst.received[i] = n
        try:
            burst.results[i] = generate(url, "ensemble", ensemble_inputs(PROMPTS[i], MAX_TOKENS),
                                        request_id=f"{tag}{i}", timeout_s=timeout_s,
                                        progress=seen)
        except queue.Empty:  # the client's deadline: no response for timeout_s
            burst.results[i] = Stream(error=f"no response within {timeout_s:g} s")

    burst.threads = [threading.Thread(target=one, args=(i,)) for i in range(NUM_STREAMS)]
    for t in burst.threads:
        t.start()
    return burst


def _until(burst: Burst, check, timeout_s: float = 60) -> bool:
    """Whether ``check`` held before the burst ended; looked at every 20 ms, on the clients'
    side: the streams run fast here (200 tokens in 2-3 s), and on a loaded machine one read of
    the metrics endpoint can take longer than the moment it looks for."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(t.is_alive() for t in burst.threads):
        if check():
            return True
        time.sleep(0.02)
    return False


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        os.kill(pid, sig)


def _freeze_decode_mid_stream(work, url: str, metrics_url: str, tag: str
                              ) -> tuple[Burst, str, list[int]]:
    """A burst, and a decode endpoint whose stubs are stopped (SIGSTOP) while they hold some of
    its streams, their decode tokens already at their clients: the burst, the endpoint
    (decode_b, unless the router gave it none), its stubs. The stubs are stopped the moment
    every client has had decode tokens, and then the endpoint's gauge is read: frozen, it
    says whether a sequence is still held (an engine updates it before each final response).
    When neither endpoint holds one, the stubs run on and a fresh burst tries again."""
    for attempt in range(3):
        stubs = {m: stubs_of(work / "repo", m) for m in ("decode_b", "decode")}
        burst = _burst(url, f"{tag}{attempt}-")
        if _until(burst, burst.mid_decode):
            for victim, pids in stubs.items():
                _signal(pids, signal.SIGSTOP)
                if metric(metrics_url, "pdtrt_engine_active_sequences", model=victim) >= 1:
                    return burst, victim, pids
                _signal(pids, signal.SIGCONT)
        burst.join()
    pytest.fail("no decode endpoint was caught holding a stream in three bursts")


def _all_identical(burst: Burst, expected: dict[int, str]) -> None:
    burst.join()
    assert sorted(burst.results) == list(range(NUM_STREAMS))
    for i, got in sorted(burst.results.items()):
        assert got.error is None and got.final_seen, (i, got.error)
        assert "".join(got.texts) == expected[i], i  # each token once, none lost


def _kv_let_go(metrics_url: str, models=("prefill", "prefill_b")) -> bool:
    """The prefills hold no KV for a decode (pulled, or expired at kv_transfer.timeout_s)."""
    return wait_for(lambda: sum(metric(metrics_url, "pdtrt_kv_held_buffers", model=m)
                                for m in models) == 0, timeout_s=20)


# The cases run in this order: those that cannot take Triton down first; a SIGKILLed or stopped
# stub can make Triton 2.51 abort (docs/design/serve.md, "owner-dead mutex"), and a case after
# it starts on the restarted server (the case fixture waits for it).

def _crashed(work, pid: int) -> str:
    """How the server ``pid`` died, when the supervisor restarted it ("" when it runs):
    Triton 2.51's owner-dead mutex abort (a stub killed or stopped at the wrong moment), or a
    SIGSEGV in its Python backend (seen once in ``TRITONBACKEND_ModelInstanceExecute``, just
    after decode_b had been stopped)."""
    if not wait_for(lambda: server_pid(work) != pid, timeout_s=15):
        return ""
    logs = "".join(p.read_text(errors="replace") for p in work.glob("server.log.restart*"))
    return next((how for how in (TRITON_ABORT, "Signal (11) received") if how in logs),
                "died")


def test_a_dropped_kv_completion_notice_hangs_nothing(case, expected):
    """TensorRT-LLM #17665's case: one transfer's "done" never arrives. The decode gives up
    its pull at kv_transfer.timeout_s (5 s here), the router retries the request (a fresh
    prefill, the other decode), and the prefill frees the KV nobody confirmed at the same
    timeout."""
    info, _work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    retries = metric(metrics_url, "pdtrt_router_retries_total", phase="decode")
    expired = sum(metric(metrics_url, "pdtrt_kv_expired_total", model=m)
                  for m in ("prefill", "prefill_b"))
    started = time.monotonic()
    _all_identical(_burst(url, KV_DROP), expected)
    assert time.monotonic() - started < 40  # nothing hung
    assert metric(metrics_url, "pdtrt_router_retries_total", phase="decode") >= retries + 1
    assert wait_for(lambda: sum(metric(metrics_url, "pdtrt_kv_expired_total", model=m)
                                for m in ("prefill", "prefill_b")) >= expired + 1, timeout_s=20)
    assert _kv_let_go(metrics_url)


def test_a_prefill_killed_during_the_kv_transfer_loses_no_request(case, expected):
    """prefill_b SIGKILLs itself the moment a decode asks for a held KV: that pull (and any
    other of its KV) fails, and each request is retried on the other prefill. The kill waits
    for the stub call in progress (``Triton.kill_process``): killed inside a ``send()``, the stub
    would make Triton 2.51 abort (the owner-dead mutex). Should Triton die all the same (the
    stub's own threads hold such mutexes too), it takes the streams with it, and the case
    xfails, naming the crash."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    server = server_pid(work)
    victim = stubs_of(work / "repo", "prefill_b")
    retries = metric(metrics_url, "pdtrt_router_retries_total", phase="decode")
    started = time.monotonic()
    burst = _burst(url, KV_KILL)
    burst.join()
    if any(got.error for got in burst.results.values()) and (crash := _crashed(work, server)):
        pytest.xfail(f"Triton 2.51 itself died with prefill_b killed ({crash}), and the "
                     "streams with it")
    _all_identical(burst, expected)
    assert time.monotonic() - started < 40
    # it died mid-transfer (a reaped stub, or a zombie, has no command line of a stub)
    assert wait_for(lambda: not set(victim) & set(stubs_of(work / "repo", "prefill_b")))
    assert metric(metrics_url, "pdtrt_router_retries_total", phase="decode") >= retries + 1
    assert _kv_let_go(metrics_url, ("prefill",))  # the survivor
    assert "KV transfer failed" in (work / "server.log").read_text()


def test_a_decode_endpoint_killed_mid_stream_loses_no_request(case, expected):
    """A decode endpoint's stub SIGKILLed with streams in flight, as an OOM kill would: its
    streams are migrated to the other decode. A stub killed inside a response's ``send()`` can
    make Triton 2.51 abort (the owner-dead mutex; seen under load); the case xfails then,
    naming the crash."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    server = server_pid(work)
    before = metric(metrics_url, "pdtrt_router_migrations_total", phase="decode")
    burst, _victim, pids = _freeze_decode_mid_stream(work, url, metrics_url, "chaos")
    _signal(pids, signal.SIGKILL)  # stopped with streams in flight; killed now
    burst.join()
    if any(got.error for got in burst.results.values()) and (crash := _crashed(work, server)):
        pytest.xfail(f"Triton 2.51 itself died with the decode killed ({crash}), and the "
                     "migrated streams with it")
    _all_identical(burst, expected)
    assert metric(metrics_url, "pdtrt_router_migrations_total", phase="decode") > before
    # a request's histograms are observed after its final response went out: wait for them
    assert wait_for(lambda: metric(metrics_url, "pdtrt_request_migration_seconds_count") >= 1,
                    timeout_s=20)
    assert _kv_let_go(metrics_url)
    log = (work / "server.log").read_text()
    assert "migrating it (died)" in log or "migrating it (stalled)" in log


def test_a_stalled_decode_endpoint_is_ejected_its_streams_migrated(case, expected):
    """SIGSTOP, not a death: a decode endpoint's stub (decode_b's, unless the router gave it
    none) stops answering with streams in flight. The liveness deadline fires, its probe goes
    unanswered, the endpoint is ejected and its streams are migrated.
    What follows is Triton 2.51's: its Python backend declares the stopped stub unhealthy, and
    the stub aborts once it runs again (SIGCONT; ``std::length_error`` in the server log), or
    the supervisor kills it after HUNG_ROUNDS unanswered probes. Either way it is reloaded and
    re-admitted -- or, when its death takes Triton down (the owner-dead mutex, or a SIGSEGV
    seen once), the server is restarted. The streams are done before it runs again; a Triton
    that dies before they are takes them with it, and the case xfails then, naming the crash."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    server = server_pid(work)
    stalled = metric(metrics_url, "pdtrt_router_migrations_total", phase="decode",
                     reason="stalled")
    counts = {e: (metric(metrics_url, "pdtrt_router_endpoint_ejections_total", endpoint=e),
                  metric(metrics_url, "pdtrt_router_endpoint_readmissions_total", endpoint=e))
              for e in ("decode", "decode_b")}  # before: the victim is chosen mid-burst
    burst, victim, pids = _freeze_decode_mid_stream(work, url, metrics_url, "stall")
    ejections, readmissions = counts[victim]
    try:
        burst.join()
        if any(got.error for got in burst.results.values()) and (crash := _crashed(work, server)):
            pytest.xfail(f"Triton 2.51 itself died with {victim} stopped ({crash}), and the "
                         "migrated streams with it")
        _all_identical(burst, expected)
        # read while the server surely runs: decode_b's death may yet take it down
        assert metric(metrics_url, "pdtrt_router_migrations_total", phase="decode",
                      reason="stalled") > stalled
        assert metric(metrics_url, "pdtrt_router_endpoint_ejections_total",
                      endpoint=victim) > ejections
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # the supervisor killed it to reload the model
                pass

    def settled() -> bool:  # the victim re-admitted, or the server died (and was restarted)
        if server_pid(work) != server:
            return True
        try:
            return metric(metrics_url, "pdtrt_router_endpoint_readmissions_total",
                          endpoint=victim) > readmissions
        except OSError:  # the server is going down: the supervisor restarts it
            return False
    assert wait_for(settled, timeout_s=HEAL_S)
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200, timeout_s=HEAL_S)
    if server_pid(work) == server:  # else its counters and KV started again
        assert _kv_let_go(metrics_url)


def test_a_killed_router_ends_every_stream_with_an_error_and_heals(case, expected):
    """No migration can save a dead router's requests (it holds their streams), and Triton 2.51
    never ends them: each client's request ends with its deadline's error -- never a hang --
    and the supervisor reloads the router (or restarts the server when Triton aborts)."""
    info, work = case
    url, metrics_url = info["endpoints"]["grpc"], info["endpoints"]["metrics"]
    pid = server_pid(work)
    deadline_s = 10.0  # the client's: no response for this long ends its request
    for attempt in range(3):  # four streams the router holds: tokens out, no end yet
        burst = _burst(url, f"router-dies{attempt}-", timeout_s=deadline_s)
        if _until(burst, lambda b=burst: sum(
                1 for i, n in enumerate(b.received) if n and i not in b.results) >= 4):
            break
        burst.join()
    else:
        pytest.fail("no burst had four streams in flight at once")
    kill_model(work / "repo", "router")
    killed = time.monotonic()
    burst.join(deadline_s + 30)
    assert not any(t.is_alive() for t in burst.threads)  # no client hangs
    assert time.monotonic() - killed < deadline_s + 15
    assert sorted(burst.results) == list(range(NUM_STREAMS))
    assert any(got.error is not None for got in burst.results.values()), "no stream was cut"
    # a stream either completed before the kill, identical, or ended with an error
    for i, got in burst.results.items():
        assert got.error is not None or "".join(got.texts) == expected[i], i
    assert wait_for(lambda: readiness(info["endpoints"]["http"]) == 200, timeout_s=HEAL_S)
    again = generate(url, "ensemble", ensemble_inputs(PROMPTS[0], MAX_TOKENS),
                     request_id="after-router", timeout_s=60)
    assert again.error is None and "".join(again.texts) == expected[0]
    if not restarted_after_abort(work, pid):  # the same server: the reloaded router counts
        assert wait_for(lambda: metric(metrics_url, "pdtrt_router_lost_to_reload_total") >= 1,
                        timeout_s=10)
        assert _kv_let_go(metrics_url)
