"""``pdtrt drain``'s library side against a fake server: it starts every model's drain, waits
until all are drained (or says what is left at its deadline), and finds a repository's drainable
models. The real server: tests/serve/test_drain_served.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdtrt.client.streams import StreamResponse
from pdtrt.engine_io import DRAIN_OUTPUT, DRAIN_PARAMETER, DrainAction
from pdtrt.errors import DrainTimeoutError, RequestError
from pdtrt.serve.drain import drain, drainable_models
from tests.conftest import GOLDEN


class FakeServer:
    """Engine models that each have ``in_flight[model]`` requests left, one fewer per status."""

    def __init__(self, in_flight: dict[str, int], *, refuse: str = "") -> None:
        self.in_flight, self.refuse = in_flight, refuse
        self.asked: list[tuple[str, str]] = []
        self.draining: set[str] = set()

    async def stream(self, model, inputs, *, request_id, parameters, outputs, error_output="",
                     fail_fast=True):
        action = parameters[DRAIN_PARAMETER]
        self.asked.append((model, action))
        if model == self.refuse:
            yield StreamResponse(error="unexpected inference input 'stop'")
            return
        if action == "drain":
            self.draining.add(model)
        elif action == "resume":
            self.draining.discard(model)
        elif self.in_flight[model]:
            self.in_flight[model] -= 1
        n = self.in_flight[model]
        state = {"draining": model in self.draining, "num_in_flight": n, "num_held": 0,
                 "drained": model in self.draining and n == 0}
        yield StreamResponse(outputs={DRAIN_OUTPUT: np.array([json.dumps(state).encode()],
                                                             dtype=np.object_)})


def test_drain_starts_every_model_then_waits_until_all_are_drained():
    server = FakeServer({"decode_b": 2, "prefill_b": 0})
    seen = []
    states = drain("fake:1", ["decode_b", "prefill_b"], poll_s=0.01, client=server,
                   on_progress=lambda s: seen.append({m: x.num_in_flight for m, x in s.items()}))
    assert all(s.drained for s in states.values())
    assert server.asked[:2] == [("decode_b", "drain"), ("prefill_b", "drain")]
    assert seen == [{"decode_b": 2, "prefill_b": 0}, {"decode_b": 1, "prefill_b": 0},
                    {"decode_b": 0, "prefill_b": 0}]


def test_drain_past_its_timeout_names_what_is_left():
    server = FakeServer({"decode_b": 10**6})
    with pytest.raises(DrainTimeoutError, match=r"not drained after 0\.05 s: decode_b "
                       r"\(\d+ in flight, 0 KV held\)"):
        drain("fake:1", ["decode_b"], timeout_s=0.05, poll_s=0.01, client=server)


def test_resume_asks_once_and_waits_for_nothing():
    server = FakeServer({"decode_b": 3})
    states = drain("fake:1", ["decode_b"], action=DrainAction.RESUME, client=server)
    assert server.asked == [("decode_b", "resume")] and not states["decode_b"].draining


def test_a_model_that_is_no_pdtrt_engine_is_refused_with_a_hint():
    with pytest.raises(RequestError, match="router: unexpected inference input") as info:
        drain("fake:1", ["router"], client=FakeServer({}, refuse="router"))
    assert "only pdtrt's engine models" in info.value.hint


def test_a_repository_s_drainable_models_are_its_engine_models():
    assert drainable_models(GOLDEN / "repo" / "reference-cpu-both") == [
        "aggregated", "decode", "prefill"]
