"""The router's phase streams: what the hot path relies on (no server)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from pdtrt.runtime.router.phase_client import (
    BlsPhaseClient,
    PhaseResponse,
    ResponseStream,
    _Workers,
)
from tests.runtime.fake_triton import FakeTriton, tokens_out, wait_until


def test_a_timed_out_wait_loses_no_response_and_the_stream_goes_on():
    async def main():
        stream = ResponseStream()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await anext(stream)
        threading.Thread(target=stream.put, args=(PhaseResponse(error="one"),)).start()
        first = await anext(stream)
        stream.put(PhaseResponse(error="two"))
        stream.put(None)
        return first.error, [r.error async for r in stream], await anext(stream, "ended")

    assert asyncio.run(main()) == ("one", ["two"], "ended")


def test_closing_a_pumped_stream_closes_its_source():
    closed = []

    async def source():
        try:
            yield PhaseResponse(error="first")
            await asyncio.sleep(60)
            yield PhaseResponse(error="never")
        finally:
            closed.append(True)

    async def main():
        stream = ResponseStream.pumped(source())
        got = await anext(stream)
        await stream.aclose()
        return got.error

    assert asyncio.run(main()) == "first" and closed == [True]


def test_the_bls_reader_asks_for_a_response_only_when_the_caller_does():
    """No read-ahead: a reader thread calling next() while the router sent the previous
    response to its client segfaulted the stub (phase_client.BlsPhaseClient)."""
    class Counting(FakeTriton):
        nexts = 0

        def bls_next(self, responses, outputs):
            Counting.nexts += 1
            return super().bls_next(responses, outputs)

    triton = Counting(lambda call: [tokens_out(t) for t in range(10)])

    async def main():
        stream = BlsPhaseClient(triton).stream("decode", {}, request_id="r", parameters={},
                                               outputs=["output_ids"])
        got = [await anext(stream), await anext(stream)]
        await asyncio.sleep(0.05)  # time enough for a reader that reads ahead
        asked = Counting.nexts
        await stream.aclose()
        return got, asked

    got, asked = asyncio.run(main())
    assert [int(r.outputs["output_ids"].item()) for r in got] == [0, 1]
    assert asked == 2


def test_workers_reuse_idle_threads_and_never_queue_behind_a_blocked_job():
    workers = _Workers("test")
    release = threading.Event()
    ran: list[int] = []
    workers.run(release.wait)  # blocks its thread
    for n in range(1, 4):
        workers.run(lambda: ran.append(threading.get_ident()))
        wait_until(lambda n=n: len(ran) == n)
        wait_until(lambda: len(workers._idle) == 1)  # its thread is back among the idle
    assert len(ran) == 3 and len(set(ran)) == 1  # one thread, reused; not the blocked one
    release.set()


def test_a_grpc_phase_request_carries_string_inputs_as_triton_reads_them():
    from tritonclient.utils import deserialize_bytes_tensor

    from pdtrt.runtime.router.kv_index import kv_events_inputs
    from pdtrt.runtime.router.phase_client import GrpcPhaseClient

    inputs = kv_events_inputs("9f2c:41,77aa:3")
    req = GrpcPhaseClient.request("prefill", inputs, request_id="x", parameters={},
                                  outputs=["kv_events"])
    raw = dict(zip((i.name for i in req.inputs), req.raw_input_contents, strict=True))
    assert deserialize_bytes_tensor(raw["kv_events_cursor"]).tolist() == [b"9f2c:41,77aa:3"]
    assert np.frombuffer(raw["input_ids"], dtype=np.int32).tolist() == [1]
