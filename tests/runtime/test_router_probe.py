"""The router's health probes (pdtrt.runtime.router.health.Prober): a probe that times out
ejects a silent endpoint, but not one whose calls answered while it waited -- a busy survivor
of its pool, not a dead one (the pools soak lost 24 requests to that before)."""

from __future__ import annotations

import asyncio

from pdtrt.client.streams import PROBE_SILENT, StreamResponse
from pdtrt.endpoints import EndpointSpec
from pdtrt.runtime.router.health import Prober
from pdtrt.runtime.router.pool import Endpoint, EndpointState


class SilentClient:
    """An endpoint that never answers a probe (its queue is long, or it hangs)."""

    async def stream(self, model, inputs, **kwargs):
        await asyncio.sleep(3600)
        yield StreamResponse()


class DeadStubClient:
    """An endpoint whose stub died: Triton answers with an error."""

    async def stream(self, model, inputs, **kwargs):
        yield StreamResponse(error="Stub process 'decode_0_0' is not healthy.")


def _check(client, answered_after_s: float | None) -> tuple[str | None, Endpoint]:
    """Probe (a 50 ms timeout) an endpoint one of whose calls answers ``answered_after_s``
    after the probe went out (negative: before; None: never)."""
    async def run():
        loop = asyncio.get_running_loop()
        endpoint = Endpoint(spec=EndpointSpec(model="decode"))
        prober = Prober(lambda _e: client, timeout_s=0.05, fresh_s=0.0, clock=loop.time)

        def answered():
            endpoint.answered_s = loop.time()

        if answered_after_s is not None and answered_after_s < 0:
            endpoint.answered_s = loop.time() + answered_after_s
        elif answered_after_s is not None:
            loop.call_later(answered_after_s, answered)
        return await prober.check(endpoint), endpoint

    return asyncio.run(run())


def test_a_silent_endpoint_is_ejected():
    problem, endpoint = _check(SilentClient(), None)
    assert problem is not None and problem.startswith(PROBE_SILENT)
    assert endpoint.state is EndpointState.EJECTED


def test_a_silent_probe_does_not_eject_an_endpoint_whose_calls_answer():
    problem, endpoint = _check(SilentClient(), 0.01)  # a response while the probe waits
    assert problem is None and endpoint.state is EndpointState.HEALTHY


def test_answers_older_than_the_probe_do_not_keep_it():
    problem, endpoint = _check(SilentClient(), -5.0)
    assert problem is not None and endpoint.state is EndpointState.EJECTED


def test_a_dead_stub_is_ejected_however_recently_it_answered():
    problem, endpoint = _check(DeadStubClient(), 0.0)
    assert "not healthy" in problem and endpoint.state is EndpointState.EJECTED
