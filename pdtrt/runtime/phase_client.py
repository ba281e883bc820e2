"""How the router reaches a phase model: in this server (BLS) or in another one (gRPC).

Both clients take the same thing -- model name, input arrays, request id, request parameters,
output names -- and yield the same :class:`PhaseResponse` stream, so the router's logic does not
depend on where a pool runs (DESIGN §3, router point 7).

- :class:`BlsPhaseClient`: a decoupled BLS request through the model's Triton seam
  (:meth:`~pdtrt.runtime.triton_io.Triton.bls_exec`). Triton 2.51's BLS response iterator is
  synchronous, so each stream is drained on a worker thread
  (:meth:`~pdtrt.runtime.triton_io.Triton.bls_next`) and one router instance keeps many
  requests in flight.
- :class:`GrpcPhaseClient`: a ``ModelStreamInfer`` stream to another Triton server over
  ``grpc.aio`` with tritonclient's protobuf types (``tritonclient.grpc.service_pb2``). It asks
  for the empty final response (``triton_enable_empty_final_response``, what tritonclient's
  ``enable_empty_final_response`` sets) so a stream that ends without data still ends, and
  half-closes the stream after the final response instead of cancelling it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from pdtrt.errors import PhaseError
from pdtrt.runtime.triton_io import Triton

__all__ = ["BlsPhaseClient", "GrpcPhaseClient", "PhaseClient", "PhaseResponse"]


@dataclass(frozen=True)
class PhaseResponse:
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def of(cls, outputs: dict[str, np.ndarray], error_output: str) -> PhaseResponse:
        """A data response, or an error when it carries the in-band ``error_output``."""
        if error_output and error_output in outputs:
            raw = outputs[error_output].reshape(-1)[0]
            return cls(error=raw.decode("utf-8", "replace") if isinstance(raw, bytes)
                       else str(raw))
        return cls(outputs)


class PhaseClient(Protocol):
    where: str  # for error messages: "this server" or the gRPC address

    def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
               parameters: Mapping[str, str], outputs: list[str], error_output: str = ""
               ) -> AsyncIterator[PhaseResponse]:
        """Responses of one decoupled request; ``error_output`` names the output that carries
        an in-band error message (pdtrt's engine models), "" for none."""
        ...


class BlsPhaseClient:
    where = "this server"

    def __init__(self, triton: Triton, pool: ThreadPoolExecutor) -> None:
        self.triton = triton
        self.pool = pool

    async def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                     parameters: Mapping[str, str], outputs: list[str], error_output: str = ""
                     ) -> AsyncIterator[PhaseResponse]:
        names = outputs + ([error_output] if error_output else [])
        responses = self.triton.bls_exec(model, inputs, request_id=request_id,
                                         parameters=parameters, outputs=names)
        loop = asyncio.get_running_loop()
        while True:
            try:
                got = await loop.run_in_executor(self.pool, self.triton.bls_next, responses,
                                                 names)
            except PhaseError as exc:  # an error response ends the stream
                yield PhaseResponse(error=exc.message)
                return
            if got is None:
                return
            yield PhaseResponse.of(got, error_output)


class GrpcPhaseClient:
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
        from tritonclient.utils import np_to_triton_dtype

        req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        for name, value in inputs.items():
            value = np.ascontiguousarray(value)
            req.inputs.add(name=name, datatype=np_to_triton_dtype(value.dtype),
                           shape=list(value.shape))
            req.raw_input_contents.append(value.tobytes())
        for name in outputs:
            req.outputs.add(name=name)
        for key, text in parameters.items():
            req.parameters[key].string_param = text
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req

    async def stream(self, model: str, inputs: Mapping[str, np.ndarray], *, request_id: str,
                     parameters: Mapping[str, str], outputs: list[str], error_output: str = ""
                     ) -> AsyncIterator[PhaseResponse]:
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
                    yield PhaseResponse(error=response.error_message)
                    continue
                infer = response.infer_response
                result = InferResult(infer)
                got = {o.name: result.as_numpy(o.name) for o in infer.outputs}
                if infer.parameters["triton_final_response"].bool_param:
                    final.set()
                if got:
                    yield PhaseResponse.of(got, error_output)
        except grpc.aio.AioRpcError as exc:
            yield PhaseResponse(error=f"{self.where}: {exc.code().name}: {exc.details()}")
        finally:
            final.set()
