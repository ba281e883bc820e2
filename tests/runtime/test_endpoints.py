"""Endpoint pools as plain state: the parameter syntax, the choice by load, ejection and
re-admission, the back-off of probes of an ejected endpoint."""

from __future__ import annotations

import pytest

from pdtrt.endpoints import EndpointSpec, format_endpoints, parse_endpoints
from pdtrt.runtime.router.health import probe_due
from pdtrt.runtime.router.pool import Endpoint, EndpointPool, eject, outstanding, readmit


def pool(*specs: str) -> EndpointPool:
    return EndpointPool(phase="decode",
                        endpoints=[Endpoint(spec=s) for s in parse_endpoints(",".join(specs))])


@pytest.mark.parametrize(("text", "expected"), [
    ("decode", [EndpointSpec(model="decode")]),
    ("decode*2,decode_b", [EndpointSpec(model="decode", instances=2),
                           EndpointSpec(model="decode_b")]),
    ("decode@10.0.0.7:8001*4", [EndpointSpec(model="decode", url="10.0.0.7:8001",
                                             instances=4)]),
    ("decode@[fd00::5]:8001, decode", [EndpointSpec(model="decode", url="[fd00::5]:8001"),
                                       EndpointSpec(model="decode")]),
    ("", []),
], ids=["one", "instances", "remote", "ipv6-and-spaces", "empty"])
def test_endpoint_lists_parse_and_format_back(text, expected):
    assert list(parse_endpoints(text)) == expected
    assert parse_endpoints(format_endpoints(expected)) == tuple(expected)


@pytest.mark.parametrize(("text", "message"), [
    ("decode@10.0.0.7", "is not MODEL[@HOST:PORT][*INSTANCES]"),
    ("decode*0", "is not MODEL[@HOST:PORT][*INSTANCES]"),
    ("decode,decode", "'decode' is named twice"),
], ids=["no-port", "zero-instances", "twice"])
def test_bad_endpoint_lists_are_refused(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("*", r"\*")):
        parse_endpoints(text)


def test_the_least_loaded_healthy_endpoint_per_instance_is_chosen():
    p = pool("decode*2", "decode_b")
    a, b = p.endpoints
    with outstanding(a, 100), outstanding(b, 60):  # a: 50 per instance, b: 60
        assert p.choose() is a
    with outstanding(a, 200), outstanding(b, 60):
        assert p.choose() is b
    assert (a.num_outstanding, a.outstanding_tokens) == (0, 0)  # released after the call


def test_equal_load_goes_round_robin():
    p = pool("decode", "decode_b", "decode_c")
    assert [p.choose().label for _ in range(6)] == ["decode", "decode_b", "decode_c"] * 2


def test_ejected_and_excluded_endpoints_are_never_chosen():
    p = pool("decode", "decode_b")
    a, b = p.endpoints
    assert eject(b, "Stub process 'decode_b_0_0' is not healthy.", now_s=1.0)
    assert not eject(b, "still down", now_s=2.0)  # already out: no second ejection
    assert {p.choose().label for _ in range(4)} == {"decode"}
    assert p.choose(exclude=[a]) is None
    assert p.describe() == "decode, decode_b (ejected: still down)"
    assert readmit(b, now_s=3.0) and not readmit(b, now_s=4.0)
    assert p.choose(exclude=[a]) is b


def test_an_ejected_endpoint_is_probed_less_and_less_often():
    e = Endpoint(spec=EndpointSpec(model="decode"))
    assert probe_due(e, now_s=0.0, interval_s=2.0)  # healthy: every interval
    due = []
    for failure_s in (10.0, 12.0, 16.0, 24.0, 40.0, 56.0):  # each failed probe
        eject(e, "down", now_s=failure_s)
        due.append(next(t for t in range(int(failure_s), 200) if probe_due(e, t, 2.0))
                   - failure_s)
    assert due == [2, 4, 8, 16, 16, 16]  # 1, 2, 4, 8 intervals, then at most 8
    readmit(e, now_s=60.0)
    assert e.num_failed_probes == 0 and probe_due(e, 60.0, 2.0)
