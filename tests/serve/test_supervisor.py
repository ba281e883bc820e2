"""pdtrt serve's supervisor without a server: what a repository needs alive, the rounds that
unload the readiness marker, reload a model whose stub died and load the marker again, and
the stub count read from /proc."""

from __future__ import annotations

import asyncio
import sys

import pytest
import yaml
from conftest import EXAMPLES

from pdtrt.endpoints import EndpointSpec
from pdtrt.engine_io import Role
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.serve.model_control import ModelState, explicit_load_args, live_stubs
from pdtrt.serve.supervisor import Supervisor, read_topology
from pdtrt.spec.load import load_deployment

READY = ModelState.READY


def _repo(tmp_path, spec: dict | None = None, mode=RepoMode.BOTH, example="reference-cpu"):
    data = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    for key, value in (spec or {}).items():
        data[key] = {**data.get(key, {}), **value}
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp_path / "repo"
    generate_repo(load_deployment(path), out, mode=mode, engines_root=tmp_path / "engines")
    return out


TWO_DECODES = {"decode": {"endpoints": [{"model": "decode"}, {"model": "decode_b"}]}}


def test_what_a_repository_needs_alive(tmp_path):
    topo = read_topology(_repo(tmp_path / "a"))
    assert dict(topo.stubs) == {m: 1 for m in ("aggregated", "decode", "postprocessing",
                                               "prefill", "preprocessing", "router")}
    assert topo.pools == {Role.PREFILL: (EndpointSpec(model="prefill"),),
                          Role.DECODE: (EndpointSpec(model="decode"),)}
    assert topo.paths == ((Role.PREFILL, Role.DECODE),)
    assert topo.alive == ("postprocessing", "preprocessing", "router") and topo.has_marker
    pools = read_topology(_repo(tmp_path / "b", {
        **TWO_DECODES, "router": {"fallback_to_aggregated": True}}))
    assert pools.pools[Role.DECODE] == (EndpointSpec(model="decode"),
                                        EndpointSpec(model="decode_b"))
    assert pools.paths == ((Role.PREFILL, Role.DECODE), (Role.AGGREGATED,))
    remote = read_topology(_repo(tmp_path / "c", mode=RepoMode.POOLS, example="reference-remote"))
    assert remote.paths == ((Role.PREFILL, Role.DECODE),) and remote.alive == ()


class FakeControl:
    """Triton's model-repository API: states, and load/unload calls recorded."""

    def __init__(self, models, *, on_load=lambda model: None):
        self.state = {m: READY for m in models}
        self.state["health"] = READY  # the marker was loaded: the deployment was ready
        self.calls: list[tuple[str, str]] = []
        self.on_load = on_load

    def states(self):
        return dict(self.state)

    def load(self, model):
        self.calls.append(("load", model))
        self.state[model] = READY
        self.on_load(model)

    def unload(self, model):
        self.calls.append(("unload", model))
        self.state[model] = ModelState.UNAVAILABLE


def supervisor(repo, *, down=(), probe_errors=None, metrics=None):
    """A supervisor whose stubs are all alive except ``down`` (until reloaded), and whose
    probes fail for those and for ``probe_errors`` (label -> message)."""
    topo = read_topology(repo)
    stubs = dict(topo.stubs)
    for model in down:
        stubs[model] = 0
    control = FakeControl(topo.stubs, on_load=lambda m: stubs.__setitem__(m, topo.stubs.get(m, 1)))

    async def probe(endpoint):
        return (probe_errors or {}).get(endpoint.label)

    return Supervisor(repo, grpc_url="127.0.0.1:1", control=control, stubs=lambda: stubs,
                      probe=probe, metrics=metrics), control


def test_a_dead_phase_unloads_the_marker_is_reloaded_and_the_marker_comes_back(tmp_path):
    sup, control = supervisor(_repo(tmp_path), down=["decode"])
    first = sup.tick()
    assert not first.ready and first.dead == ("decode",) and first.reloaded == ()
    assert first.problems == ("decode: no healthy endpoint (decode: its Python-backend stub is "
                              "not running)",)
    assert control.calls == [("unload", "health")]  # readiness says so before the reload
    second = sup.tick()  # missing twice: reloaded, without a server restart
    assert second.reloaded == ("decode",) and control.calls[-1] == ("load", "decode")
    third = sup.tick()
    assert third.ready and third.dead == () and control.calls[-1] == ("load", "health")
    assert sup.tick().ready and len(control.calls) == 3  # nothing more to do


def test_a_reload_marks_the_model_files_changed_and_nothing_else(tmp_path):
    """Triton reloads a loaded model only when its files changed since it was loaded (a dead
    stub changes none), and a config.pbtxt touched alone only updates the instances: the
    supervisor touches the version directory's files, at the load, content unchanged."""
    repo = _repo(tmp_path)
    files = [p for p in (repo / "decode").rglob("*") if p.is_file()]
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    other = {p: p.stat().st_mtime_ns for p in (repo / "prefill").rglob("*")}
    seen_at_load: dict[str, int] = {}
    sup, control = supervisor(repo, down=["decode"])
    control.on_load = lambda m: seen_at_load.setdefault(
        m, (repo / m / "1" / "model.py").stat().st_mtime_ns)
    sup.tick()
    sup.tick()
    assert control.calls[-1] == ("load", "decode")
    assert seen_at_load["decode"] > before[repo / "decode" / "1" / "model.py"][0]
    assert all(p.read_bytes() == before[p][1] for p in files)
    assert (repo / "decode" / "config.pbtxt").stat().st_mtime_ns == before[
        repo / "decode" / "config.pbtxt"][0]
    assert {p: p.stat().st_mtime_ns for p in (repo / "prefill").rglob("*")} == other


def test_a_pool_with_another_healthy_endpoint_stays_ready_while_the_dead_one_is_reloaded(
        tmp_path):
    sup, control = supervisor(_repo(tmp_path, TWO_DECODES), down=["decode_b"])
    assert [sup.tick().ready for _ in range(3)] == [True, True, True]
    assert control.calls == [("load", "decode_b")]  # the marker was never unloaded


def test_a_router_model_without_its_stub_means_not_ready(tmp_path):
    sup, control = supervisor(_repo(tmp_path), down=["router"])
    health = sup.tick()
    assert not health.ready
    assert health.problems == ("router: its Python-backend stub is not running",)


def test_other_servers_are_probed_not_reloaded(tmp_path):
    repo = _repo(tmp_path, example="reference-remote")
    sup, control = supervisor(repo, probe_errors={
        "decode@127.0.0.1:8001": "the Triton server at 127.0.0.1:8001: UNAVAILABLE: refused"})
    health = sup.tick()
    assert health.problems == ("decode: no healthy endpoint (decode@127.0.0.1:8001: the Triton "
                               "server at 127.0.0.1:8001: UNAVAILABLE: refused)",)
    assert control.calls == [("unload", "health")]
    waited = sup.wait_ready(0.05, interval_s=0.01)
    assert not waited.ready and waited.problems == health.problems


def test_explicit_model_control_loads_everything_but_the_marker(tmp_path):
    args = explicit_load_args(_repo(tmp_path))
    assert args[0] == "--model-control-mode=explicit"
    assert "--load-model=decode" in args and "--load-model=ensemble" in args
    assert not any("health" in a for a in args)


def test_live_stubs_are_counted_per_model_from_proc(tmp_path):
    repo = tmp_path / "repo"
    proc = tmp_path / "proc"
    stub = "/opt/backends/python/triton_python_backend_stub"
    for pid, argv in {
        "11": [stub, f"{repo}/decode/1/model.py", "shm", "decode_0_0", "DEFAULT", ""],
        "12": [stub, f"{repo}/decode/1/model.py", "shm", "decode_0_1", "DEFAULT", ""],
        "13": [stub, f"{repo}/router/1/model.py", "shm", "router_0_0", "DEFAULT", ""],
        "14": [stub, f"{tmp_path}/other/decode/1/model.py"],  # another server's
        "15": [sys.executable, f"{repo}/decode/1/model.py"],  # not a stub
        "16": [],  # a zombie: no command line
    }.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))
    (proc / "self").mkdir()
    assert live_stubs(repo, proc) == {"decode": 2, "router": 1}


def test_a_probe_that_never_answers_is_a_problem_not_a_hang(tmp_path):
    from pdtrt.client.streams import probe

    class Silent:
        where = "nowhere"

        async def stream(self, *args, **kwargs):
            await asyncio.sleep(60)
            yield None

    assert asyncio.run(probe(Silent(), "decode", timeout_s=0.05)) == (
        "no answer to a health probe within 0.05 s")


def test_requests_in_flight_in_a_dead_router_are_counted_as_lost_for_its_reload(tmp_path):
    """Triton never ends them; the dead router's in-flight gauge (kept by the server until
    the reload) says how many, and the reloaded router exports the running total."""
    from pdtrt.runtime.router.reload_losses import LOST_FILE, read_lost

    repo = _repo(tmp_path)
    (repo / "router" / LOST_FILE).write_text('{"lost": 9}')  # a previous server's
    page = ('# TYPE pdtrt_router_requests_in_flight gauge\n'
            'pdtrt_router_requests_in_flight{model="router"} 3\n'
            'pdtrt_router_requests_in_flight{model="router_b"} 5\n')
    sup, control = supervisor(repo, down=["router"], metrics=lambda: page)
    assert read_lost(repo / "router") == 0  # counted from this supervisor's start
    sup.tick()
    sup.tick()
    assert control.calls[-1] == ("load", "router") and read_lost(repo / "router") == 3
    sup, control = supervisor(repo, down=["decode"], metrics=lambda: page)
    sup.tick()
    sup.tick()  # a dead phase loses no router request
    assert control.calls[-1] == ("load", "decode") and read_lost(repo / "router") == 0


def test_a_live_model_that_stops_answering_is_killed_then_reloaded(tmp_path):
    """A phase still streaming to a router whose stub died blocks for good (Triton 2.51 waits
    for the dead caller to take the response): alive, never answering again. After
    HUNG_ROUNDS silent rounds its stub is killed, and the usual rounds reload it."""
    from pdtrt.serve.supervisor import HUNG_ROUNDS

    repo = _repo(tmp_path)
    sup, control = supervisor(repo, probe_errors={"decode": "no answer within 4 s"})
    killed: list[str] = []

    def kill(model):
        killed.append(model)
        sup.stubs()[model] = 0  # its stub is gone
        return 1

    stubs = sup.stubs()
    sup.stubs = lambda: stubs
    sup.kill = kill
    rounds = [sup.tick() for _ in range(HUNG_ROUNDS)]
    assert [h.killed for h in rounds] == [()] * (HUNG_ROUNDS - 1) + [("decode",)]
    assert not any(h.ready for h in rounds) and killed == ["decode"]
    sup.probe = lambda endpoint: asyncio.sleep(0, result=None)  # the new stub answers
    assert sup.tick().dead == ("decode",)
    assert sup.tick().reloaded == ("decode",) and control.calls[-1] == ("load", "decode")
    assert sup.tick().ready and killed == ["decode"]


def test_a_model_that_answers_now_and_then_is_not_hung(tmp_path):
    answers = iter([False, False, True] * 3)
    sup, _control = supervisor(_repo(tmp_path))

    async def probe(endpoint):
        return None if endpoint.model != "decode" or next(answers) else "no answer"

    sup.probe = probe
    sup.kill = lambda model: pytest.fail(f"{model} killed")
    for _ in range(9):
        assert sup.tick().killed == ()


def test_a_router_whose_event_loop_does_not_answer_is_not_ready_then_killed_and_reloaded(
        tmp_path):
    """Its stub lives, but its loop is wedged (a blocking call on it): the router's probe --
    answered from that loop -- goes unanswered, readiness says so in the first round, and
    after HUNG_ROUNDS rounds the stub is killed so that the next rounds reload it."""
    from pdtrt.serve.supervisor import HUNG_ROUNDS

    sup, control = supervisor(_repo(tmp_path),
                              probe_errors={"router": "no answer to a health probe within 4 s"})
    stubs = sup.stubs()
    sup.stubs = lambda: stubs
    sup.kill = lambda model: stubs.__setitem__(model, 0) or 1
    first = sup.tick()
    assert not first.ready and first.problems == (
        "router: its event loop does not answer (no answer to a health probe within 4 s)",)
    assert control.calls == [("unload", "health")]
    rounds = [first] + [sup.tick() for _ in range(HUNG_ROUNDS - 1)]
    assert rounds[-1].killed == ("router",)
    sup.probe = lambda endpoint: asyncio.sleep(0, result=None)  # the reloaded router answers
    assert sup.tick().dead == ("router",)
    assert sup.tick().reloaded == ("router",) and ("load", "router") in control.calls
    assert sup.tick().ready and control.calls[-1] == ("load", "health")


def test_a_draining_model_is_not_ready_but_never_killed_as_hung(tmp_path):
    """A drained endpoint answers its probe with "draining" (docs/drain.md): an answer, so its
    stub is left alone however long the drain takes; it serves no path meanwhile."""
    from pdtrt.runtime.engine.drain import PROBED

    sup, _control = supervisor(_repo(tmp_path), probe_errors={"decode": PROBED})
    sup.kill = lambda model: pytest.fail(f"{model} killed")
    rounds = [sup.tick() for _ in range(5)]
    assert all(h.killed == () and not h.ready for h in rounds)
    assert "draining" in rounds[-1].problems[0]
