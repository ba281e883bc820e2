"""The router's phase streams: what the hot path relies on (no server)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from pdtrt.client.streams import StreamResponse
from pdtrt.runtime.router.bls_client import BlsPhaseClient, ResponseStream, _Workers
from tests.runtime.fake_triton import FakeTriton, tokens_out, wait_until


def test_a_timed_out_wait_loses_no_response_and_the_stream_goes_on():
    async def main():
        stream = ResponseStream()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await anext(stream)
        threading.Thread(target=stream.put, args=(StreamResponse(error="one"),)).start()
        first = await anext(stream)
        stream.put(StreamResponse(error="two"))
        stream.put(None)
        return first.error, [r.error async for r in stream], await anext(stream, "ended")

    assert asyncio.run(main()) == ("one", ["two"], "ended")


def test_a_timed_read_loses_no_response_that_comes_as_its_deadline_fires():
    async def main():
        loop = asyncio.get_running_loop()
        stream = ResponseStream()
        with pytest.raises(TimeoutError):
            await stream.read(0.01)
        stream.put(StreamResponse(error="late"))
        after_timeout = (await stream.read(0.01)).error

        def expire_then_put():  # the deadline wins the race: the next read gets it
            stream._expire()
            stream.put(StreamResponse(error="raced"))

        def put_then_expire():  # the response wins: the read returns it
            stream.put(StreamResponse(error="first"))
            stream._expire()

        got = []
        for race in (expire_then_put, put_then_expire):
            waiting = asyncio.ensure_future(stream.read(10))
            await asyncio.sleep(0)
            loop.call_soon(race)
            try:
                got.append((await waiting).error)
            except TimeoutError:
                got.append("timed out")
                got.append((await stream.read(10)).error)
        return after_timeout, got

    assert asyncio.run(main()) == ("late", ["timed out", "raced", "first"])


def test_a_timed_read_waits_its_own_timeout_with_one_timer_per_stream():
    async def main():
        loop = asyncio.get_running_loop()
        stream = ResponseStream()
        loop.call_later(0.05, stream.put, StreamResponse(error="one"))
        await stream.read(0.1)  # arms the timer for t + 0.1
        timer = stream._timer
        started = loop.time()
        with pytest.raises(TimeoutError):
            await stream.read(0.1)  # the timer re-arms for this wait's own deadline
        waited = loop.time() - started
        loop.call_later(0.01, stream.put, StreamResponse(error="two"))
        await stream.read(10)  # arms the timer for t + 10
        started = loop.time()
        with pytest.raises(TimeoutError):
            await stream.read(0.05)  # an earlier deadline than the timer's: it is moved
        sooner = loop.time() - started
        loop.call_later(0.15, stream.put, None)
        end = await stream.read()  # an untimed read does not time out
        pending = stream._timer
        await stream.aclose()
        return timer, waited, sooner, end, pending, stream._timer

    first_timer, waited, sooner, end, pending, after_close = asyncio.run(main())
    assert waited >= 0.1 - 1e-3 and 0.05 - 1e-3 <= sooner < 1
    assert first_timer is not None and end is None
    assert after_close is None and (pending is None or pending.cancelled())


def test_closing_a_stream_cancels_its_deadline_timer():
    async def main():
        stream = ResponseStream()
        stream.put(StreamResponse(error="one"))
        await stream.read(10)  # ready: no timer
        assert stream._timer is None
        waiting = asyncio.ensure_future(stream.read(10))
        await asyncio.sleep(0)
        timer = stream._timer
        waiting.cancel()
        await stream.aclose()
        return timer, stream._timer

    timer, after_close = asyncio.run(main())
    assert timer is not None and timer.cancelled() and after_close is None


def test_closing_a_pumped_stream_closes_its_source():
    closed = []

    async def source():
        try:
            yield StreamResponse(error="first")
            await asyncio.sleep(60)
            yield StreamResponse(error="never")
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
    response to its client segfaulted the stub (bls_client.BlsPhaseClient)."""
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
