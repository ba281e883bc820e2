"""The typed values of the LLM client: a generation request, its streamed chunks, its result.

A *chunk* is one streamed response of the TensorRT-LLM ensemble (``text_output``). An
in-flight-batching engine sends one response per generated token by default; with TensorRT-LLM's
``stream_interval`` N, one at the first token and then every N-th, so a response may hold several
tokens. Where the model answers ``num_output_tokens`` (NVIDIA's ``return_num_output_tokens``;
pdtrt's ensembles do) each chunk carries its token count, else it counts as one token. Every
chunk carries the monotonic time (seconds, the client's injected clock) at which the client
received it; TTFT, inter-token latencies and end-to-end latency are differences of those times
and the send time, the inter-token latencies spread over a response's tokens
(:func:`token_gaps_s`). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from pdtrt.client.timing import ServerTiming
from pdtrt.errors import ModelNotFoundError, RequestError, ServerUnavailableError

__all__ = ["Chunk", "ErrorKind", "GenerateRequest", "GenerateResult", "ModelSignature",
           "InputTensor", "token_gaps_s"]


def token_gaps_s(times_s: Sequence[float], sizes: Sequence[int] = ()) -> tuple[float, ...]:
    """The inter-token latencies of a stream whose responses came at ``times_s`` holding
    ``sizes`` tokens each (empty: one each): a response of k tokens that came g seconds after
    the one before gives k gaps of g / k -- its tokens' mean spacing, as SGLang's
    ``bench_serving`` counts them -- so the samples are per token, not per response, and sum to
    the time from the first response to the last. The first response's tokens have no gap
    (TensorRT-LLM answers the first token alone, so that is one token)."""
    if not sizes:
        return tuple(b - a for a, b in zip(times_s, times_s[1:], strict=False))
    held = [(t, k) for t, k in zip(times_s, sizes, strict=True) if k > 0]  # text, no token: none
    gaps: list[float] = []
    for (a, _), (b, k) in zip(held, held[1:], strict=False):
        gaps += [(b - a) / k] * k
    return tuple(gaps)


@dataclass(frozen=True, kw_only=True)
class GenerateRequest:
    """One generation request in the NVIDIA ensemble's terms (``None``: the model's default)."""

    prompt: str
    max_tokens: int = 64
    stream: bool = True
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    request_id: str | None = None  # None: the client assigns a unique one
    exclude_input_in_output: bool = True
    # never stop at the end token: sends the ensemble's ``end_id`` as -1 (NVIDIA's ensemble
    # input; what OpenAI servers call ``ignore_eos``), so every request runs to max_tokens
    ignore_eos: bool = False
    # ask for the server's timing (pdtrt.client.timing) where the model declares the input;
    # a model without it is not asked and the result has no timing
    return_timing: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise RequestError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True, kw_only=True)
class Chunk:
    """One streamed response: its text, the monotonic receive time in seconds and the tokens
    it holds (the model's ``num_output_tokens``; 1 where the model does not say)."""

    text: str
    time_s: float
    num_tokens: int = 1


class ErrorKind(StrEnum):
    REQUEST = "request"  # the server answered with an error for this request
    TIMEOUT = "timeout"  # no final response before the client's deadline
    CANCELLED = "cancelled"  # the caller cancelled it
    UNAVAILABLE = "unavailable"  # the connection to the server failed


@dataclass(frozen=True, kw_only=True)
class GenerateResult:
    """What came back for one request; times are monotonic seconds of the client's clock."""

    request_id: str
    model: str
    send_time_s: float
    end_time_s: float
    chunks: tuple[Chunk, ...] = ()
    error: str | None = None
    error_kind: ErrorKind | None = None
    timing: ServerTiming | None = None  # the server's, when asked and answered

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return "".join(c.text for c in self.chunks)

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    @property
    def num_tokens(self) -> int:
        """Output tokens: the responses' ``num_output_tokens``, one per response where the
        model does not say."""
        return sum(c.num_tokens for c in self.chunks)

    @property
    def ttft_s(self) -> float | None:
        """Send to first non-empty response; None when nothing came back."""
        return self.chunks[0].time_s - self.send_time_s if self.chunks else None

    @property
    def itls_s(self) -> tuple[float, ...]:
        """Inter-token latencies, a response's gap spread over its tokens
        (:func:`token_gaps_s`; ``num_tokens - 1`` of them when the first response holds one)."""
        return token_gaps_s([c.time_s for c in self.chunks],
                            [c.num_tokens for c in self.chunks])

    @property
    def e2e_s(self) -> float:
        """Send to the end of the request (its final response, error or deadline)."""
        return self.end_time_s - self.send_time_s

    def raise_for_error(self) -> GenerateResult:
        """Raise the matching :class:`~pdtrt.errors.ClientError` if the request failed."""
        if self.error is None:
            return self
        what = f"request {self.request_id} to model '{self.model}' failed: {self.error}"
        if self.error_kind is ErrorKind.UNAVAILABLE:
            raise ServerUnavailableError(what, hint="is the server still running?")
        if self.error_kind is ErrorKind.REQUEST and "unknown model" in self.error.lower():
            raise ModelNotFoundError(what)
        raise RequestError(what, hint="raise --timeout" if self.error_kind is
                           ErrorKind.TIMEOUT else None)

    def to_dict(self) -> dict[str, object]:
        return {
            "request_id": self.request_id, "model": self.model, "text": self.text,
            "num_chunks": self.num_chunks, "num_tokens": self.num_tokens,
            "ttft_ms": None if self.ttft_s is None else self.ttft_s * 1e3,
            "itl_ms": [x * 1e3 for x in self.itls_s], "e2e_ms": self.e2e_s * 1e3,
            "error": self.error, "error_kind": None if self.error_kind is None
            else str(self.error_kind),
        }


@dataclass(frozen=True, kw_only=True)
class InputTensor:
    """One input tensor to send: Triton dtype name (``BYTES``, ``INT32``...), shape, values."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    values: tuple[object, ...]


@dataclass(frozen=True, kw_only=True)
class ModelSignature:
    """What a served model's configuration declares: inputs (name -> Triton dtype), outputs,
    batching, decoupling, its string parameters and -- for an ensemble -- its steps' models."""

    name: str
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    max_batch_size: int = 0
    decoupled: bool = True
    parameters: dict[str, str] = field(default_factory=dict)
    steps: tuple[str, ...] = ()  # ensemble steps' model names, in order
