"""The router when its server is told to stop (SIGTERM reaches the stub): every request in
flight ends at once with an error -- even one whose phase has stopped answering -- and new
ones are refused (a fake seam, no server)."""

from __future__ import annotations

import asyncio
import threading
import time

from pdtrt.runtime.router.model import TritonPythonModel
from tests.runtime.fake_triton import FakeTriton, model_args, tokens_out
from tests.runtime.test_router_model import PARAMS, ROUTER_PARAMS, request


def test_a_stop_ends_requests_in_flight_with_an_error_and_refuses_new_ones():
    release = threading.Event()
    triton = FakeTriton()

    def phases(call):
        if call.is_stop:
            return []
        if call.model == "prefill":
            return [tokens_out(7, context_phase_params=PARAMS)]
        return decode()

    def decode():
        yield tokens_out(7)
        yield tokens_out(8)
        triton.stop_server()  # SIGTERM: the server is stopping
        release.wait(10)  # an endpoint that answers no more
        yield tokens_out(9)

    triton.phases = phases
    model = TritonPythonModel(triton)
    model.initialize(model_args("router", ROUTER_PARAMS))
    try:
        req = request(max_new=50)
        start = time.monotonic()
        asyncio.run(model.execute([req]))
        assert time.monotonic() - start < 5  # it did not wait for the silent endpoint
        assert req.tokens == [7, 8] and req.num_finals == 1
        assert req.errors == ["the server is shutting down"]
        late = request(request_id="late")
        asyncio.run(model.execute([late]))
        assert late.num_finals == 1 and late.errors == ["the server is shutting down"]
        assert [c for c in triton.calls if c.request_id.startswith("late")] == []
    finally:
        release.set()
        model.finalize()
    assert triton.released
