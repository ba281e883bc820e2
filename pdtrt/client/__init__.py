"""The LLM client: typed generation requests over Triton gRPC streams (the ensemble I/O).

::

    from pdtrt.client import GenerateRequest, LLMClient

    with LLMClient("127.0.0.1:8001") as client:
        result = client.generate(GenerateRequest(prompt="Hello", max_tokens=16)).raise_for_error()
        print(result.text, result.ttft_s, result.itls_s)
"""

from pdtrt.client.client import LLMClient, Pending
from pdtrt.client.inputs import build_inputs
from pdtrt.client.transport import GrpcTransport, StreamEvent, Transport, TransportFactory
from pdtrt.client.types import (
    Chunk,
    ErrorKind,
    GenerateRequest,
    GenerateResult,
    ModelSignature,
    TensorSpec,
)

__all__ = ["Chunk", "ErrorKind", "GenerateRequest", "GenerateResult", "GrpcTransport",
           "LLMClient", "ModelSignature", "Pending", "StreamEvent", "TensorSpec", "Transport",
           "TransportFactory", "build_inputs"]
