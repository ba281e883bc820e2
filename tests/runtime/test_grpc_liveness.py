"""The liveness deadline of a phase call over gRPC (:func:`pdtrt.runtime.router.health.watched`
over :meth:`~pdtrt.client.streams.GrpcStreamClient.stream`): a real ``grpc.aio`` server
(Triton's ``ModelStreamInfer`` service from tritonclient's protobufs, scripted per test) on a
free loopback port, pdtrt's gRPC stream client in front of it. What the deadline must never
do to a gRPC call: cancel it while its endpoint is alive (a timed-out ``grpc.aio`` read
cancels its call, grpc ``aio/_call.py``), lose a response, or leave the call running on the
server once the stream is given up.

The server here is a stand-in for a Triton server whose model stalls or never answers; the
same deadline on the real server and the BLS path is covered by tests/serve
(test_self_healing, test_migration_chaos) and tests/runtime/test_router_failover.py.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from pdtrt.client.streams import GrpcStreamClient
from pdtrt.runtime.router.health import STOPPED_ANSWERING, watched

LIVENESS_S = 0.3


def _token(token: int, *, final: bool = False) -> service_pb2.ModelStreamInferResponse:
    infer = service_pb2.ModelInferResponse(model_name="decode")
    ids = np.array([[token]], dtype=np.int32)
    infer.outputs.add(name="output_ids", datatype="INT32", shape=list(ids.shape))
    infer.raw_output_contents.append(ids.tobytes())
    infer.parameters["triton_final_response"].bool_param = final
    return service_pb2.ModelStreamInferResponse(infer_response=infer)


def _final() -> service_pb2.ModelStreamInferResponse:
    infer = service_pb2.ModelInferResponse(model_name="decode")
    infer.parameters["triton_final_response"].bool_param = True
    return service_pb2.ModelStreamInferResponse(infer_response=infer)


Script = Callable[[], AsyncIterator[service_pb2.ModelStreamInferResponse]]


def _then_stall(*tokens: int) -> Script:
    """A model that sends ``tokens``, then nothing for a minute."""
    async def script():
        for token in tokens:
            yield _token(token)
        await asyncio.sleep(60)
    return script


class _Decode(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each ``ModelStreamInfer`` call with what the test's script yields, and notes
    how each call ended."""

    def __init__(self) -> None:
        self.script: Script | None = None
        self.ended: list[str] = []

    async def ModelStreamInfer(self, request_iterator, context):  # noqa: N802 (Triton's name)
        await request_iterator.__anext__()
        assert self.script is not None
        try:
            async for response in self.script():
                yield response
            self.ended.append("completed")
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise


@pytest.fixture
def served():
    """(the servicer, a client) on a loopback port of the OS's choosing; runs the test's
    coroutine on the server's event loop."""
    def run(test: Callable[[_Decode, GrpcStreamClient], object]) -> None:
        async def main() -> None:
            server = grpc.aio.server()
            decode = _Decode()
            service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(decode, server)
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            try:
                await test(decode, GrpcStreamClient(f"127.0.0.1:{port}"))
            finally:
                await server.stop(0)
        asyncio.run(main())
    return run


def _open(client: GrpcStreamClient) -> AsyncIterator:
    return client.stream("decode", {"input_ids": np.array([[1, 2]], np.int32)},
                         request_id="r", parameters={}, outputs=["output_ids"])


async def _ended(decode: _Decode, within_s: float = 10.0) -> None:
    """Wait until the server has seen its call end (gRPC tells it asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not decode.ended and loop.time() < deadline:
        await asyncio.sleep(0.02)


async def _read_all(responses) -> list:
    return [r async for r in responses]


def test_a_stalled_call_ends_with_an_error_once_its_endpoint_is_found_dead(served):
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        decode.script = _then_stall(7)  # the model stalls
        asked = []

        async def alive():
            asked.append(asyncio.get_running_loop().time())
            return "no answer to a health probe within 0.1 s"

        loop = asyncio.get_running_loop()
        started = loop.time()
        got = await asyncio.wait_for(_read_all(watched(
            _open(client), liveness_s=LIVENESS_S, alive=alive, what="endpoint decode")), 10)
        took = loop.time() - started
        assert [r.outputs["output_ids"].tolist() for r in got[:1]] == [[[7]]]
        assert len(got) == 2 and got[1].error == (
            f"endpoint decode {STOPPED_ANSWERING}: no answer to a health probe within 0.1 s")
        assert len(asked) == 1 and LIVENESS_S <= asked[0] - started < LIVENESS_S + 1.0
        assert took < LIVENESS_S + 2.0
        await _ended(decode)  # the call was cancelled, not left running on the server
        assert decode.ended == ["cancelled"]
    served(test)


def test_a_slow_but_alive_endpoint_keeps_its_call_and_every_response(served):
    """Alive (it answers its probe): the same wait gets another ``liveness_s``, again and
    again, and nothing of the stream is lost -- the read is never cancelled."""
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        async def script():
            yield _token(1)
            await asyncio.sleep(LIVENESS_S * 3.5)  # three deadlines pass
            yield _token(2)
            yield _token(3)
            yield _final()
        decode.script = script
        asked = []

        async def alive():
            asked.append(1)
            return None

        got = await asyncio.wait_for(_read_all(watched(
            _open(client), liveness_s=LIVENESS_S, alive=alive, what="endpoint decode")), 10)
        assert [r.error for r in got] == [None] * 3
        assert [int(r.outputs["output_ids"].item()) for r in got] == [1, 2, 3]
        assert 2 <= len(asked) <= 4
        assert decode.ended == ["completed"]
    served(test)


def test_a_call_that_never_answers_ends_within_its_first_response_deadline(served):
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        decode.script = _then_stall()

        async def alive():
            return None  # alive: only the first-response deadline can end it

        loop = asyncio.get_running_loop()
        started = loop.time()
        got = await asyncio.wait_for(_read_all(watched(
            _open(client), liveness_s=LIVENESS_S, alive=alive, what="endpoint decode",
            first_within_s=0.5)), 10)
        assert [r.error for r in got] == ["endpoint decode sent nothing within 0.5 s of the call"]
        assert 0.5 <= loop.time() - started < 2.5
    served(test)


def test_a_cancelled_reader_is_cancelled_and_cancels_its_call(served):
    """Cancelling the relay's task cancels it (not an error response) and the call."""
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        decode.script = _then_stall(1)
        first = asyncio.Event()

        async def relay():
            async for _r in watched(_open(client), liveness_s=LIVENESS_S,
                                    alive=lambda: asyncio.sleep(0, "dead"), what="e"):
                first.set()

        task = asyncio.ensure_future(relay())
        await asyncio.wait_for(first.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await _ended(decode)
        assert decode.ended == ["cancelled"]
    served(test)


def test_a_stream_dropped_unread_cancels_its_call(served):
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        decode.script = _then_stall(1)
        stream = _open(client)
        assert (await stream.__anext__()).outputs["output_ids"].tolist() == [[1]]
        del stream
        gc.collect()
        await _ended(decode)
        assert decode.ended == ["cancelled"]
    served(test)


def test_a_stream_read_to_its_end_ends_with_its_call(served):
    async def test(decode: _Decode, client: GrpcStreamClient) -> None:
        async def script():
            yield _token(4)
            yield _token(5, final=True)
        decode.script = script
        got = await asyncio.wait_for(_read_all(_open(client)), 10)
        assert [int(r.outputs["output_ids"].item()) for r in got] == [4, 5]
        assert decode.ended == ["completed"]
    served(test)
