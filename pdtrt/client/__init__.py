"""The LLM client: typed generation requests over Triton gRPC streams (the ensemble I/O).

::

    from pdtrt.client import GenerateRequest, LLMClient

    with LLMClient("127.0.0.1:8001") as client:
        result = client.generate(GenerateRequest(prompt="Hello", max_tokens=16)).raise_for_error()
        print(result.text, result.ttft_s, result.itls_s)

Two clients over one wire: :class:`LLMClient` sends text to the ensemble (``pdtrt infer`` /
``bench``); :class:`~pdtrt.client.streams.GrpcStreamClient` sends tensors to a router or
engine model (the router's remote pools, the OpenAI front, the supervisor's probes). The
names load on first use (PEP 562), so a Triton stub that imports :mod:`pdtrt.client.streams`
loads nothing else of this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {
    "LLMClient": "client", "Pending": "client", "build_inputs": "inputs",
    "GrpcTransport": "transport", "StreamEvent": "transport", "Transport": "transport",
    "TransportFactory": "transport", "Chunk": "types", "ErrorKind": "types",
    "GenerateRequest": "types", "GenerateResult": "types", "InputTensor": "types",
    "ModelSignature": "types", "GrpcStreamClient": "streams", "StreamResponse": "streams",
    "ServerTiming": "timing",
}

if TYPE_CHECKING:
    from pdtrt.client.client import LLMClient, Pending
    from pdtrt.client.inputs import build_inputs
    from pdtrt.client.streams import GrpcStreamClient, StreamResponse
    from pdtrt.client.timing import ServerTiming
    from pdtrt.client.transport import GrpcTransport, StreamEvent, Transport, TransportFactory
    from pdtrt.client.types import (
        Chunk,
        ErrorKind,
        GenerateRequest,
        GenerateResult,
        InputTensor,
        ModelSignature,
    )

__all__ = ["Chunk", "ErrorKind", "GenerateRequest", "GenerateResult", "GrpcStreamClient",
           "GrpcTransport", "InputTensor", "LLMClient", "ModelSignature", "Pending",
           "ServerTiming", "StreamEvent", "StreamResponse", "Transport", "TransportFactory",
           "build_inputs"]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return __all__
