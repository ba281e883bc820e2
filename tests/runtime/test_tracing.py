"""pdtrt's OpenTelemetry seam (pdtrt.runtime.tracing): traceparent checks, and spans exported
over OTLP/HTTP by the real SDK exporter to a real receiver (tests/otlp_receiver.py)."""

from __future__ import annotations

import time

import pytest

from pdtrt.runtime.tracing import Tracing, incoming_traceparent, valid_traceparent, wall_ns
from pdtrt.tracing_settings import TracingSettings
from tests.otlp_receiver import OtlpReceiver

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TP = f"00-{TRACE}-{PARENT}-01"


@pytest.mark.parametrize(("text", "valid"), [
    (TP, TP),
    (f"  {TP.upper()} ", TP),  # trimmed, lower-cased
    (f"00-{'0' * 32}-{PARENT}-01", None),  # all-zero trace id
    (f"00-{TRACE}-{'0' * 16}-01", None),  # all-zero span id
    (f"ff-{TRACE}-{PARENT}-01", None),  # version ff
    (f"00-{TRACE}-{PARENT}-01-extra", None),  # version 00 has four fields
    (f"01-{TRACE}-{PARENT}-01-extra", f"01-{TRACE}-{PARENT}-01-extra"),  # a later version may
    (f"00-{TRACE[:-1]}-{PARENT}-01", None),
    ("", None), (None, None), ("garbage", None),
], ids=["valid", "case-and-space", "zero-trace", "zero-span", "version-ff", "v00-extra",
        "later-version", "short-trace", "empty", "none", "garbage"])
def test_a_traceparent_is_followed_only_when_valid(text, valid):
    assert valid_traceparent(text) == valid


def test_a_request_parameter_that_is_not_text_is_no_traceparent():
    assert incoming_traceparent({"traceparent": TP}) == TP
    assert incoming_traceparent({"traceparent": 7}) is None
    assert incoming_traceparent({}) is None


def test_spans_reach_an_otlp_receiver_as_one_trace_under_the_callers_span():
    with OtlpReceiver() as rx:
        tracing = Tracing(TracingSettings(endpoint=rx.endpoint, service_prefix="t"), "router")
        start = time.time_ns()
        root = tracing.start("router", parent=TP, server=True, start_ns=start,
                             attributes={"pdtrt.n": 3, "pdtrt.none": None, "pdtrt.obj": [1]})
        child_tp = tracing.traceparent(root)
        tracing.record("queue", parent=root, start_ns=start, end_ns=start + 5_000_000)
        tracing.end(root, end_ns=start + 9_000_000, error="boom")
        assert rx.spans == []  # batched: nothing leaves before a flush or the batch delay
        tracing.shutdown()  # flushes
        spans = rx.wait_for(lambda s: len(s) == 2, timeout_s=5)
    by_name = {s.name: s for s in spans}
    router, queue = by_name["router"], by_name["queue"]
    assert router.service == queue.service == "t-router"
    assert router.trace_id == queue.trace_id == TRACE
    assert router.parent_span_id == PARENT and queue.parent_span_id == router.span_id
    assert child_tp == f"00-{TRACE}-{router.span_id}-01"
    assert router.start_ns == start and router.end_ns == start + 9_000_000
    assert queue.duration_s == pytest.approx(0.005)
    assert router.attributes == {"pdtrt.n": 3, "pdtrt.obj": "[1]"}
    assert router.status_code == 2 and router.status_message == "boom"  # ERROR
    assert router.kind == 2  # SERVER


def test_a_callers_sampled_traceparent_is_followed_whatever_the_ratio():
    with OtlpReceiver() as rx:
        tracing = Tracing(TracingSettings(endpoint=rx.endpoint, sample_ratio=0.0), "front")
        tracing.end(tracing.start("followed", parent=TP))
        tracing.end(tracing.start("own-trace"))  # no caller: the ratio, 0, says no
        tracing.shutdown()
        spans = rx.wait_for(lambda s: len(s) >= 1, timeout_s=5)
    assert [s.name for s in spans] == ["followed"]


def test_a_monotonic_time_becomes_epoch_nanoseconds():
    now = time.monotonic()
    assert abs(wall_ns(now - 1.0, time.monotonic) - (time.time_ns() - 1_000_000_000)) < 50e6


def test_a_collector_that_does_not_answer_never_holds_the_stop_for_long():
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces"
        tracing = Tracing(TracingSettings(endpoint=url), "decode")
        tracing.end(tracing.start("decode", parent=TP))
        start = time.monotonic()
        tracing.shutdown(timeout_s=0.5)
        assert time.monotonic() - start < 2.0
