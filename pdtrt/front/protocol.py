"""The OpenAI API's request bodies, validated at the edge, and what pdtrt makes of them.

``/v1/completions`` and ``/v1/chat/completions`` bodies become pydantic models
(:class:`CompletionBody`, :class:`ChatBody`); a body that is not JSON, has a field of the wrong
type or a field the API does not have is an :class:`~pdtrt.errors.ApiError` (400) naming the
field, as OpenAI answers ``Unrecognized request argument``. Fields of the API that the engines
cannot honour (``n`` > 1, more than :data:`~pdtrt.engine_io.MAX_TOP_LOG_PROBS` alternatives per
token -- chat ``top_logprobs``, completions ``logprobs`` --, tools, a JSON ``response_format``,
``logit_bias``, ``echo``, ``suffix``) are refused with the reason rather than ignored -- a client
must not get a different answer than it asked for. What remains becomes a frozen
:class:`OpenAIRequest` in TensorRT-LLM's terms (the router's inputs): OpenAI's defaults are
``temperature`` 1 and ``top_p`` 1 (sampling), TensorRT-LLM's are greedy, so both are always
sent; ``temperature`` 0 is greedy in both.

Extensions that vLLM and trtllm-serve accept and benchmark tools send (``top_k``,
``min_tokens``, ``ignore_eos``, ``repetition_penalty``) are accepted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pdtrt.engine_io import MAX_TOP_LOG_PROBS, RequestSampling
from pdtrt.errors import ApiError

__all__ = ["ChatBody", "ChatMessage", "CompletionBody", "OpenAIRequest", "parse_body"]

MAX_STOP_STRINGS = 4  # OpenAI's limit on ``stop``


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StreamOptions(_Body):
    include_usage: bool = False


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)  # name, tool_call_id, refusal...

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self, index: int) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise ApiError(f"messages[{index}] has a '{part.type}' content part; this "
                               "deployment's model reads text only", param="messages")
        return "".join(p.text or "" for p in self.content)


class _Common(_Body):
    model: str
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**64)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    n: int | None = Field(default=None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    logit_bias: dict[str, float] | None = None
    # extensions (vLLM / trtllm-serve / benchmark tools)
    top_k: int | None = Field(default=None, ge=0)
    min_tokens: int | None = Field(default=None, ge=0)
    ignore_eos: bool = False
    repetition_penalty: float | None = Field(default=None, gt=0)


class CompletionBody(_Common):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = Field(default=16, ge=1)  # OpenAI's default for completions
    logprobs: int | None = Field(default=None, ge=0)  # alternatives per token (the limit: below)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)


class ChatBody(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0)  # the limit: chat_sampling
    tools: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None


@dataclass(frozen=True, kw_only=True)
class OpenAIRequest:
    """What one OpenAI body asks: the engine's sampling (:class:`~pdtrt.engine_io.
    RequestSampling`, the one type that crosses to the engines; built here and nowhere else on
    this side) and what the front does itself: the output budget (``max_tokens`` None: as
    many as the context window leaves), stop strings, ``ignore_eos``, streaming, usage."""

    max_tokens: int | None
    sampling: RequestSampling
    stop: tuple[str, ...]
    ignore_eos: bool
    stream: bool
    include_usage: bool

    @property
    def logprobs(self) -> bool:
        return self.sampling.return_log_probs

    @property
    def top_logprobs(self) -> int:
        """Alternatives per token (chat ``top_logprobs``, completions ``logprobs``)."""
        return self.sampling.num_top_log_probs


def _refuse(field: str, why: str) -> ApiError:
    return ApiError(f"'{field}' {why}", param=field)


def parse_body(raw: bytes, kind: type[_Common]) -> Any:
    """``raw`` (an HTTP body) as ``kind``; raises :class:`ApiError` (400) naming what is wrong."""
    try:
        data = json.loads(raw or b"null")
    except ValueError as exc:
        raise ApiError(f"the request body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError("the request body must be a JSON object")
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        if first["type"] == "extra_forbidden":
            raise ApiError(f"Unrecognized request argument supplied: {where}",
                           param=where) from None
        raise ApiError(f"{where}: {first['msg']}", param=where) from None


def _stops(stop: str | list[str] | None) -> tuple[str, ...]:
    words = [stop] if isinstance(stop, str) else list(stop or [])
    if len(words) > MAX_STOP_STRINGS:
        raise _refuse("stop", f"has {len(words)} strings; at most {MAX_STOP_STRINGS}")
    return tuple(w for w in words if w)


def sampling_of(body: _Common, *, max_tokens: int | None, logprobs: bool,
                top_logprobs: int = 0) -> OpenAIRequest:
    """The :class:`OpenAIRequest` of a validated body; raises :class:`ApiError` for API features
    the engines cannot honour."""
    if (body.n or 1) != 1:
        raise _refuse("n", f"is {body.n}; pdtrt's engines return one choice per request (n=1)")
    if body.logit_bias:
        raise _refuse("logit_bias", "is not supported by pdtrt's engines")
    if body.stream_options is not None and not body.stream:
        raise _refuse("stream_options", "is only allowed when 'stream' is true")
    return OpenAIRequest(
        max_tokens=max_tokens, sampling=RequestSampling(
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p, top_k=body.top_k or 0,
            seed=body.seed, presence_penalty=body.presence_penalty or 0.0,
            frequency_penalty=body.frequency_penalty or 0.0,
            repetition_penalty=_or(body.repetition_penalty, 1.0),
            min_tokens=body.min_tokens or 0, return_log_probs=logprobs,
            num_top_log_probs=top_logprobs),
        stop=_stops(body.stop), ignore_eos=body.ignore_eos, stream=body.stream,
        include_usage=body.stream_options is not None and body.stream_options.include_usage)


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def completion_sampling(body: CompletionBody) -> OpenAIRequest:
    if body.echo:
        raise _refuse("echo", "is not supported (the engines return the new tokens only)")
    if body.suffix:
        raise _refuse("suffix", "is not supported (no fill-in-the-middle)")
    if (body.best_of or 1) != 1:
        raise _refuse("best_of", "must be 1 (one choice per request)")
    _check_top("logprobs", body.logprobs)
    return sampling_of(body, max_tokens=body.max_tokens, logprobs=body.logprobs is not None,
                       top_logprobs=body.logprobs or 0)


def _check_top(field: str, value: int | None) -> None:
    """Refuse more alternatives per token than the engines return (OpenAI's own chat limit;
    the completions API documents 5, pdtrt serves up to the same limit there)."""
    if value is not None and value > MAX_TOP_LOG_PROBS:
        raise _refuse(field, f"is {value}; pdtrt's engines return at most "
                      f"{MAX_TOP_LOG_PROBS} alternatives per token")


def chat_sampling(body: ChatBody) -> OpenAIRequest:
    if body.tools or body.tool_choice not in (None, "none"):
        raise _refuse("tools", "are not supported (no tool-call parser)")
    if body.response_format and body.response_format.get("type") not in (None, "text"):
        raise _refuse("response_format", "must be {'type': 'text'} (no guided decoding)")
    _check_top("top_logprobs", body.top_logprobs)
    if body.top_logprobs is not None and not body.logprobs:
        raise _refuse("top_logprobs", "needs 'logprobs': true")
    if (body.max_tokens is not None and body.max_completion_tokens is not None
            and body.max_tokens != body.max_completion_tokens):
        raise _refuse("max_completion_tokens", f"({body.max_completion_tokens}) and "
                      f"'max_tokens' ({body.max_tokens}) disagree; send one")
    limit = body.max_completion_tokens or body.max_tokens
    return sampling_of(body, max_tokens=limit, logprobs=body.logprobs,
                       top_logprobs=body.top_logprobs or 0)
