"""Streams to a Triton server over gRPC: the one client of pdtrt's token-level models.

:class:`GrpcStreamClient` opens a ``ModelStreamInfer`` stream over ``grpc.aio`` with
tritonclient's protobuf types (``tritonclient.grpc.service_pb2``). It asks for the empty final
response (``triton_enable_empty_final_response``, what tritonclient's
``enable_empty_final_response`` sets) so a stream that ends without data still ends, and
half-closes the stream after the final response; a caller that stops listening cancels it.
Every process that talks to a router or an engine model with their tensors uses it: the
router (pools in other servers, or its own server's phases with ``phase_transport: grpc``),
the OpenAI front (:mod:`pdtrt.front.engine_client`) and ``pdtrt serve``'s supervisor (its
probes). The router's in-process twin, a BLS stream, yields the same :class:`StreamResponse`
(:mod:`pdtrt.runtime.router.bls_client`), so the router does not depend on where a pool runs
(docs/serve.md, "Pools in other Triton servers").

:func:`probe` asks an endpoint the cheapest question there is -- TensorRT-LLM's stop request
for an id nobody uses, which every engine model answers at once with an empty final response
without touching its engine -- and says whether it answered in time.

Imports: numpy only; ``grpc`` and ``tritonclient`` load on first use (a Triton stub with
``phase_transport: bls`` never loads them).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pdtrt.engine_io import PROBE_ID_PREFIX

__all__ = ["FIXED_SIZE_DTYPES", "PROBE_ID_PREFIX", "PROBE_SILENT", "GrpcStreamClient",
           "StreamClient", "StreamResponse", "probe", "probe_inputs"]


@dataclass(frozen=True)
class StreamResponse:
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def of(cls, outputs: dict[str, np.ndarray], error_output: str) -> StreamResponse:
        """A data response, or an error when it carries the in-band ``error_output``."""
        if error_output and error_output in outputs:
            raw = outputs[error_output].reshape(-1)[0]
            return cls(error=raw.decode("utf-8", "replace") if isinstance(raw, bytes)
                       else str(raw))
        return cls(outputs)


class StreamClient(Protocol):
    where: str  # for error messages: "this server" or the gRPC address

    def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
               parameters: Mapping[str, str], outputs: list[str], error_output: str = "",
               fail_fast: bool = True) -> AsyncIterator[StreamResponse]:
        """Responses of one decoupled request; ``error_output`` names the output that carries
        an in-band error message (pdtrt's engine models), "" for none. ``fail_fast``: a
        request for a model known to be down fails at once (probes pass False)."""
        ...


class GrpcStreamClient:
    """Streams to the Triton server at ``url`` (``HOST:PORT``); the channel opens on first
    use, on the caller's event loop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = f"the Triton server at {url}"
        self._stub: Any = None

    def _service(self) -> Any:
        if self._stub is None:  # created on the router's event loop, on first use
            import grpc
            from tritonclient.grpc import service_pb2_grpc

            channel = grpc.aio.insecure_channel(self.url, options=[
                ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)])
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return self._stub

    @staticmethod
    def request(model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                parameters: Mapping[str, str], outputs: list[str]) -> Any:
        from tritonclient.grpc import service_pb2
        from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

        req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        for name, value in inputs.items():
            value = np.ascontiguousarray(value)
            req.inputs.add(name=name, datatype=np_to_triton_dtype(value.dtype),
                           shape=list(value.shape))
            # BYTES: each element length-prefixed, as Triton reads a string tensor
            raw = serialize_byte_tensor(value).item() if value.dtype == np.object_ \
                else value.tobytes()
            req.raw_input_contents.append(raw)
        for name in outputs:
            req.outputs.add(name=name)
        for key, text in parameters.items():
            req.parameters[key].string_param = text
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req

    async def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                     parameters: Mapping[str, str], outputs: list[str], error_output: str = "",
                     fail_fast: bool = True) -> AsyncIterator[StreamResponse]:
        import grpc
        from tritonclient.grpc import InferResult

        request = self.request(model, inputs, request_id=request_id, parameters=parameters,
                               outputs=outputs + ([error_output] if error_output else []))
        final = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield request
            await final.wait()  # then half-close: the server ends the stream

        call = self._service().ModelStreamInfer(requests())
        try:
            async for response in call:
                if response.error_message:
                    final.set()
                    yield StreamResponse(error=response.error_message)
                    continue
                infer = response.infer_response
                got = _outputs(infer, InferResult)
                if infer.parameters["triton_final_response"].bool_param:
                    final.set()
                if got:
                    yield StreamResponse.of(got, error_output)
        except grpc.aio.AioRpcError as exc:
            yield StreamResponse(error=f"{self.where}: {exc.code().name}: {exc.details()}")
        finally:
            final.set()
            if not call.done():  # the caller stopped listening: end the call too
                call.cancel()


# The fixed-size tensor datatypes of the KServe v2 protocol, as numpy reads their raw bytes
# (tritonclient.utils.triton_to_np_dtype gives the same; tests/client/test_streams.py checks)
FIXED_SIZE_DTYPES: dict[str, np.dtype[Any]] = {name: np.dtype(t) for name, t in (
    ("BOOL", np.bool_), ("UINT8", np.uint8), ("UINT16", np.uint16), ("UINT32", np.uint32),
    ("UINT64", np.uint64), ("INT8", np.int8), ("INT16", np.int16), ("INT32", np.int32),
    ("INT64", np.int64), ("FP16", np.float16), ("FP32", np.float32), ("FP64", np.float64))}


def _outputs(infer: Any, infer_result: Any) -> dict[str, np.ndarray]:
    """The outputs of a ``ModelInferResponse`` by name, as tritonclient's
    ``InferResult.as_numpy`` reads them (tritonclient 2.x ``grpc/_infer_result.py``: the
    i-th output's bytes are ``raw_output_contents[i]``, a fixed-size type read with
    ``np.frombuffer`` and reshaped to the output's shape). Read here for the fixed-size types
    (every token of a relayed stream: ``as_numpy`` looks each name up again and builds the
    shape element by element); BYTES, BF16 and outputs without raw contents go to
    ``infer_result`` (tritonclient's ``InferResult``) itself."""
    raw = infer.raw_output_contents
    got: dict[str, np.ndarray] = {}
    result = None
    for i, output in enumerate(infer.outputs):
        dtype = FIXED_SIZE_DTYPES.get(output.datatype)
        if dtype is not None and i < len(raw):
            got[output.name] = np.frombuffer(raw[i], dtype=dtype).reshape(tuple(output.shape))
        else:
            result = result or infer_result(infer)
            got[output.name] = result.as_numpy(output.name)
    return got


def probe_inputs() -> dict[str, np.ndarray]:
    """The inputs of a health probe: a stop request (``stop`` = true) in the engine model's
    config shapes, for a one-token prompt."""
    one = np.array([[1]], dtype=np.int32)
    return {"input_ids": one, "input_lengths": one, "request_output_len": one,
            "stop": np.array([[True]])}


PROBE_SILENT = "no answer to a health probe"  # what :func:`probe` says of a silent endpoint


async def probe(client: StreamClient, model: str, *, timeout_s: float,
                error_output: str = "") -> str | None:
    """Ask ``model`` through ``client`` to stop a request nobody sent: None when it answered
    without an error within ``timeout_s``, else what went wrong (its error, or the silence)."""
    async def ask() -> str | None:
        stream = client.stream(model, probe_inputs(),
                               request_id=PROBE_ID_PREFIX + secrets.token_hex(6),
                               parameters={}, outputs=["output_ids"], error_output=error_output,
                               fail_fast=False)
        async with aclosing(stream) as responses:
            async for r in responses:
                if r.error is not None:
                    return r.error
        return None

    try:
        return await asyncio.wait_for(ask(), timeout_s)
    except TimeoutError:
        return f"{PROBE_SILENT} within {timeout_s:g} s"
    except Exception as exc:
        return f"health probe failed: {type(exc).__name__}: {exc}"
