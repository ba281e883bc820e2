"""An engine model drained on request (docs/drain.md): it refuses new requests and says so to
probes, lets the requests in flight finish, reports drained, and serves again once resumed."""

from __future__ import annotations

import json

import pytest

from pdtrt.engine_io import DRAIN_OUTPUT, DRAIN_PARAMETER, DRAINING, PROBE_ID_PREFIX
from tests.runtime.fake_triton import FakeRequest
from tests.runtime.test_engine_model import (  # noqa: F401 -- engine_model: a fixture (F811 below)
    Gate,
    ended_once,
    engine_model,
    request,
    stop,
)


def drain(model, action="drain"):
    ask = request(request_id="pdtrt-drain-1")
    ask = FakeRequest(ask.request_id, ask.inputs, {DRAIN_PARAMETER: action})
    model.execute([ask])
    assert ended_once(ask)
    return json.loads(ask.responses[-1].outputs[DRAIN_OUTPUT].reshape(-1)[0])


def probe(model):
    ask = stop(request_id=PROBE_ID_PREFIX + "abc")
    model.execute([ask])
    ask.wait_final()
    return ask.errors


def test_a_drained_engine_finishes_what_it_has_and_takes_nothing_new(engine_model):  # noqa: F811
    plain, _ = engine_model()
    clean = request(max_new=8, request_id="clean")
    plain.execute([clean])
    assert ended_once(clean)
    gate = Gate()
    model, _ = engine_model(faults=gate)  # its decode steps held by the gate
    busy = request(max_new=8, request_id="busy")
    model.execute([busy])

    state = drain(model)
    assert state == {"draining": True, "num_in_flight": 1, "num_held": 0, "drained": False}
    late = request(request_id="late")
    model.execute([late])
    assert ended_once(late, error=f"{DRAINING}: it takes no new requests")
    assert len(probe(model)) == 1 and DRAINING in probe(model)[0]  # routers: choose it no more

    gate.open()
    assert ended_once(busy) and busy.tokens == clean.tokens  # finished, unchanged
    assert drain(model, "status")["drained"] is True

    assert drain(model, "resume") == {"draining": False, "num_in_flight": 0, "num_held": 0,
                                      "drained": False}
    assert probe(model) == []
    again = request(max_new=8, request_id="again")
    model.execute([again])
    assert ended_once(again) and again.tokens == clean.tokens


def test_a_plain_stop_still_stops_while_draining(engine_model):  # noqa: F811
    gate = Gate()
    model, _ = engine_model(faults=gate)
    busy = request(max_new=50)
    model.execute([busy])
    drain(model)
    halt = stop()
    model.execute([halt])
    assert ended_once(halt)  # not the probe's "draining": a router's stop goes through
    gate.open()
    assert ended_once(busy) and len(busy.tokens) < 50


@pytest.mark.parametrize("action", ["pause", ""], ids=["unknown", "empty"])
def test_an_unknown_drain_action_is_refused(engine_model, action):  # noqa: F811
    model, _ = engine_model()
    ask = FakeRequest("d", request().inputs, {DRAIN_PARAMETER: action})
    model.execute([ask])
    assert ended_once(ask, error="request parameter 'pdtrt_drain' is")
    assert "drain, resume, status" in ask.errors[0]
