"""The Triton seam itself: every ``pb_utils`` call under the lock, the blocking BLS ``exec`` and
``next()`` outside it, and no other module of pdtrt touching ``pb_utils``.

:class:`BackendTriton` runs here over a recording stand-in for ``triton_python_backend_utils``
that notes, for each call, whether the seam's lock was held; the real module is exercised by
the end-to-end tests (tests/serve/).
"""

from __future__ import annotations

import ast
import dataclasses
import os
import signal
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from pdtrt.errors import PhaseError
from pdtrt.runtime import metrics as metrics_mod
from pdtrt.runtime import triton_io
from pdtrt.runtime.metrics import MetricKind, MetricSpec
from pdtrt.runtime.triton_io import BackendTriton
from tests.conftest import ROOT
from tests.runtime.fake_clock import FakeClock


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []  # (what, was the seam's lock held)

    def note(self, what: str) -> None:
        self.calls.append((what, triton_io._LOCK.locked()))


def recording_pb_utils(rec: Recorder) -> SimpleNamespace:
    """The part of ``triton_python_backend_utils`` the seam uses, noting every call."""

    class Tensor:
        def __init__(self, name, value):
            rec.note("Tensor")
            self._name, self.value = name, value

        def name(self):
            rec.note("Tensor.name")
            return self._name

        def as_numpy(self):
            rec.note("as_numpy")
            return self.value

    class TritonError:
        def __init__(self, message):
            rec.note("TritonError")
            self.text = message

        def message(self):
            rec.note("TritonError.message")
            return self.text

    class InferenceResponse:
        def __init__(self, output_tensors=(), error=None):
            rec.note("InferenceResponse")
            self.tensors, self.err = list(output_tensors), error

        def output_tensors(self):
            rec.note("output_tensors")
            return self.tensors

        def has_error(self):
            rec.note("has_error")
            return self.err is not None

        def error(self):
            rec.note("error")
            return self.err

    class Responses:  # a decoupled BLS call's response iterator
        def __init__(self):
            self.items = iter(answers)  # a data response, then an error response

        def __iter__(self):
            return self

        def __next__(self):
            rec.note("next")
            return next(self.items)

    class InferenceRequest:
        def __init__(self, **kwargs):
            rec.note("InferenceRequest")

        def exec(self, decoupled):
            rec.note("exec")
            return Responses()

    class Metric:
        def increment(self, value):
            rec.note("increment")

        def set(self, value):
            rec.note("set")

    class MetricFamily:
        COUNTER, GAUGE = "counter", "gauge"

        def __init__(self, name, description, kind):
            rec.note("MetricFamily")

        def Metric(self, labels):  # noqa: N802 (pb_utils' name)
            rec.note("Metric")
            return Metric()

    class Sender:
        def send(self, response=None, flags=0):
            rec.note("send")

    class Request:
        def request_id(self):
            rec.note("request_id")
            return "r1"

        def parameters(self):
            rec.note("parameters")
            return '{"request_type": "context_only"}'

        def requested_output_names(self):
            rec.note("requested_output_names")
            return ["output_ids"]

        def get_response_sender(self):
            rec.note("get_response_sender")
            return Sender()

        def inputs(self):
            rec.note("inputs")
            return [Tensor("input_ids", np.array([[1, 2, 3]], dtype=np.int32))]

        def is_cancelled(self):
            rec.note("is_cancelled")
            return False

    answers = [InferenceResponse([Tensor("output_ids", np.array([[[7]]], dtype=np.int32))]),
               InferenceResponse(error=TritonError("boom"))]
    return SimpleNamespace(
        TRITONSERVER_RESPONSE_COMPLETE_FINAL=1, Tensor=Tensor, TritonError=TritonError,
        InferenceResponse=InferenceResponse, InferenceRequest=InferenceRequest,
        MetricFamily=MetricFamily, Request=Request)


def test_every_pb_utils_call_holds_the_lock_except_the_blocking_exec_and_next():
    rec = Recorder()
    pb = recording_pb_utils(rec)
    rec.calls.clear()  # the scripted BLS answers were made by the test, not the seam
    triton = BackendTriton(pb)
    [incoming] = triton.receive([pb.Request()], ["input_ids", "stop"], decoupled=True)
    assert incoming.request_id == "r1" and list(incoming.inputs) == ["input_ids"]
    assert incoming.parameters == {"request_type": "context_only"}
    triton.is_cancelled(incoming)
    triton.send(incoming, {"output_ids": np.array([[[1]]], dtype=np.int32)})
    triton.send_error(incoming, "bad", final=False)
    triton.close(incoming)
    triton.response({"OUTPUT": np.array([[b"x"]], dtype=object)})
    triton.error_response("bad")
    metric = triton.metric(MetricSpec("m_total", "m", MetricKind.COUNTER), {"model": "x"})
    triton.increment(metric, 1.0)
    triton.set_gauge(metric, 2.0)
    responses = triton.bls_exec("decode", {"input_ids": np.array([[1]], dtype=np.int32)},
                                request_id="r1~ab", parameters={}, outputs=["output_ids"])
    assert triton.bls_next(responses, ["output_ids", "pdtrt_error"])["output_ids"].tolist() == [
        [[7]]]
    with pytest.raises(PhaseError, match="boom"):
        triton.bls_next(responses, ["output_ids"])
    assert triton.bls_next(responses, ["output_ids"]) is None
    assert not triton_io._LOCK.locked()
    unlocked = sorted({what for what, locked in rec.calls if not locked})
    assert unlocked == ["exec", "next"], rec.calls
    assert {what for what, _ in rec.calls} >= {"send", "exec", "increment", "set", "Metric",
                                               "is_cancelled", "get_response_sender",
                                               "inputs", "output_tensors"}


def test_a_bls_call_waiting_for_its_first_response_blocks_nothing_else():
    """``exec`` returns with the callee's first response (or never, for a request lost in a
    dying callee): meanwhile the model's other calls go through."""
    rec = Recorder()
    pb = recording_pb_utils(rec)
    answered, release = threading.Event(), threading.Event()
    pb.InferenceRequest.exec = lambda self, decoupled: release.wait(30)
    triton = BackendTriton(pb)
    [incoming] = triton.receive([pb.Request()], ["input_ids"], decoupled=True)
    waiting = threading.Thread(target=triton.bls_exec, args=("prefill", {}), kwargs={
        "request_id": "r", "parameters": {}, "outputs": ["output_ids"]})
    waiting.start()

    def others() -> None:
        triton.send(incoming, {"output_ids": np.array([[[1]]], dtype=np.int32)})
        triton.is_cancelled(incoming)
        answered.set()

    threading.Thread(target=others).start()
    try:
        assert answered.wait(5), "a send waited for another stream's exec"
    finally:
        release.set()
        waiting.join(5)


def _names_used(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Name):
            found.add(node.id)
    return found


def test_no_pdtrt_module_imports_pb_utils_or_takes_the_lock():
    """The seam gets ``pb_utils`` injected (by the generated model.py shims); nothing in pdtrt
    imports it, and no module but triton_io names the lock."""
    for path in sorted((ROOT / "pdtrt").rglob("*.py")):
        names = _names_used(ast.parse(path.read_text(encoding="utf-8")))
        assert "triton_python_backend_utils" not in names, path
        if path.name != "triton_io.py":
            assert not names & {"pb_utils", "_LOCK", "PB_LOCK"}, path


def test_a_gauge_set_to_the_value_it_has_costs_no_round_trip():
    from tests.runtime.fake_triton import FakeTriton

    class Counting(FakeTriton):
        def __init__(self) -> None:
            super().__init__()
            self.sets: list[float] = []

        def set_gauge(self, metric, value):
            self.sets.append(value)
            super().set_gauge(metric, value)

    triton = Counting()
    metrics = metrics_mod.Metrics(triton, {"g": MetricSpec("g", "a gauge", MetricKind.GAUGE)},
                                {"model": "m"})
    for value in (1, 1, 2, 2, 1):
        metrics.set("g", value)
    assert triton.sets == [1, 2, 1] and triton.metrics["g"] == 1


def test_deferred_counters_are_summed_into_one_round_trip_per_metric_and_flush():
    from tests.runtime.fake_triton import FakeTriton

    class Counting(FakeTriton):
        def __init__(self) -> None:
            super().__init__()
            self.increments: list[tuple[str, float]] = []
            self.incremented = threading.Event()

        def increment(self, metric, value):
            self.increments.append((metric, value))
            super().increment(metric, value)
            self.incremented.set()

    triton = Counting()
    specs = {"a": MetricSpec("a", "a counter", MetricKind.COUNTER),
             "b": MetricSpec("b", "another", MetricKind.COUNTER)}
    metrics = metrics_mod.Metrics(triton, specs, {"model": "m"}, flush_s=3600)
    for _ in range(50):
        metrics.add("a")
    metrics.add("b", 0.5)
    assert triton.increments == []  # nothing sent before the flush
    metrics.flush()
    assert sorted(triton.increments) == [("a", 50.0), ("b", 0.5)]
    assert triton.metrics["a"] == 50 and triton.metrics["b"] == 0.5

    quick = metrics_mod.Metrics(triton, specs, {"model": "m"}, flush_s=0.01)
    triton.incremented.clear()
    quick.add("a", 2)
    assert triton.incremented.wait(5)  # the flusher's turn
    assert triton.metrics["a"] == 2


def test_a_response_carries_only_the_outputs_its_request_asked_for():
    """The stub would drop the others without the GIL (BackendTriton.send says why)."""
    rec = Recorder()
    pb = recording_pb_utils(rec)
    made: list[str] = []
    tensor = pb.Tensor
    pb.Tensor = lambda name, value: made.append(name) or tensor(name, value)
    triton = BackendTriton(pb)
    [asked] = triton.receive([pb.Request()], [], decoupled=True)  # asks for output_ids only
    assert asked.requested_outputs == ("output_ids",)
    one = np.array([[1]], dtype=np.int32)
    triton.send(asked, {"output_ids": one, "sequence_length": one, "last_token_time_ns": one})
    assert made == ["output_ids"]
    made.clear()
    triton.send(dataclasses.replace(asked, requested_outputs=()), {"output_ids": one,
                                                                   "sequence_length": one})
    assert made == ["output_ids", "sequence_length"]  # named none: gets every output


def _ended_stream(pb, triton):
    """A BLS stream read to its end through the seam; returns a weak reference to its iterator
    (the caller drops its own at once, as the router does)."""
    import weakref

    class Ended:  # the stub's iterator after its final response: nothing more
        def __iter__(self):
            return self

        def __next__(self):
            raise StopIteration

    pb.InferenceRequest.exec = lambda self, decoupled: Ended()
    responses = triton.bls_exec("decode", {}, request_id="r", parameters={}, outputs=[])
    assert triton.bls_next(responses, []) is None
    return weakref.ref(responses)


def test_an_ended_bls_stream_is_kept_until_a_round_trip_through_the_stub_has_passed():
    """Triton's stub would free it without the GIL if Python let go first (_EndedStreams)."""
    rec = Recorder()
    pb = recording_pb_utils(rec)
    triton = BackendTriton(pb)
    [incoming] = triton.receive([pb.Request()], [], decoupled=True)
    ended = _ended_stream(pb, triton)
    assert ended() is not None  # the caller let go; the seam holds it
    triton.is_cancelled(incoming)  # a round trip after it ended: the stub has forgotten it
    assert ended() is None

    cancelled = _ended_stream(pb, triton)
    pb.Request.is_cancelled = lambda self: True  # may come from the stub's cache: no proof
    triton.is_cancelled(incoming)
    assert cancelled() is not None
    triton.release()  # the stub forgets every stream before finalize()
    assert cancelled() is None


def test_an_ended_bls_stream_no_round_trip_follows_is_let_go_after_the_hold():
    rec = Recorder()
    pb = recording_pb_utils(rec)
    clock = FakeClock()
    triton = BackendTriton(pb, clock=clock)
    first = _ended_stream(pb, triton)
    clock.advance(triton_io.ENDED_STREAM_HOLD_S / 2)
    kept = _ended_stream(pb, triton)  # within the hold: nothing is let go
    assert first() is not None
    clock.advance(triton_io.ENDED_STREAM_HOLD_S / 2 + 0.001)
    second = _ended_stream(pb, triton)  # each new end lets go of those past the hold
    assert first() is None and kept() is not None and second() is not None


def test_an_injected_kill_waits_for_a_send_in_progress(monkeypatch):
    """Fault injection's SIGKILL never lands inside a stub call: killed inside ``send()``, a
    stub leaves its response's shared-memory mutex owner-dead and Triton 2.51 aborts."""
    rec = Recorder()
    pb = recording_pb_utils(rec)
    inside, release = threading.Event(), threading.Event()

    class SlowSender:
        def send(self, response=None, flags=0):
            inside.set()
            release.wait(30)
            rec.note("send")

    pb.Request.get_response_sender = lambda self: SlowSender()
    kills: list[tuple[int, int, bool]] = []
    monkeypatch.setattr(triton_io.os, "kill", lambda pid, sig: kills.append(
        (pid, sig, [w for w, _ in rec.calls].count("send") == 1)))
    triton = BackendTriton(pb)
    [incoming] = triton.receive([pb.Request()], ["input_ids"], decoupled=True)
    sending = threading.Thread(target=triton.send, args=(incoming, {}))
    sending.start()
    assert inside.wait(5)
    killing = threading.Thread(target=triton.kill_process)
    killing.start()
    killing.join(0.3)
    assert kills == [] and killing.is_alive()  # not while the send is inside the stub
    release.set()
    sending.join(5)
    killing.join(5)
    assert kills == [(os.getpid(), signal.SIGKILL, True)]  # right after the send returned
