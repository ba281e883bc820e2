"""The OpenAI-compatible HTTP front: ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``.

An aiohttp application over one :class:`~pdtrt.front.engine_client.EngineClient`. Each request is
validated (:mod:`pdtrt.front.protocol`), tokenized (:mod:`pdtrt.front.text`), generated
(:mod:`pdtrt.front.generation`) and answered as one JSON body or as server-sent events
(``data: {chunk}`` ... ``data: [DONE]``), in OpenAI's shapes: ``chat.completion`` /
``chat.completion.chunk`` / ``text_completion``, ``usage`` always on a whole answer and on a
stream's last chunk when ``stream_options.include_usage``. Errors are OpenAI's error body with
its status codes (400 bad request, 401 key, 404 model or path, 500/503 the deployment, 504 a
silent deployment); an error after a stream began is one ``data: {"error": ...}`` event, then
``[DONE]``. The server is run with aiohttp's ``handler_cancellation``, so a client that hangs up
cancels its handler, and leaving the generation stops the request on the server (KV freed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from pdtrt.engine_io import TopLogProbs
from pdtrt.errors import ApiError
from pdtrt.front import generation
from pdtrt.front.deployment import ServedDeployment
from pdtrt.front.engine_client import EngineClient, engine_inputs
from pdtrt.front.metrics import CONTENT_TYPE, FrontMetrics, RequestTimer
from pdtrt.front.protocol import (
    ChatBody,
    CompletionBody,
    OpenAIRequest,
    chat_sampling,
    completion_sampling,
    parse_body,
)
from pdtrt.front.text import FrontTokenizer
from pdtrt.runtime.tracing import TRACEPARENT, Tracing, valid_traceparent

__all__ = ["FrontConfig", "make_app"]

log = logging.getLogger(__name__)
_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# a stream's status when it ended in an error (its HTTP status was 200)
_STREAM_STATUS = web.RequestKey("pdtrt_status", int)
# A request with this header set to "true" gets the router's timing of it (where its time to
# first token went: pdtrt.runtime.router.timing) as the field TIMING_FIELD of the whole
# response, or of a stream's last chunk (the one with the finish_reason); null when the
# deployment has no router. Not a response header: a stream's headers go before its timing.
TIMING_HEADER = "x-pdtrt-timing"
TIMING_FIELD = "pdtrt_timing"


@dataclass(frozen=True, kw_only=True)
class FrontConfig:
    deployment: ServedDeployment
    tokenizer: FrontTokenizer
    engine: EngineClient
    api_key: str | None = None
    stall_s: float = 60.0  # a deployment silent this long fails the request (504)
    metrics: FrontMetrics = field(default_factory=FrontMetrics)
    tracing: Tracing | None = None  # a span per request, when tracing is on


@dataclass(frozen=True)
class _Prepared:
    kind: str  # "chat" | "completion"
    request_id: str
    prompt: list[int]
    sampling: OpenAIRequest
    max_tokens: int
    timing: bool = False  # the client asked for the router's timing (TIMING_HEADER)
    traceparent: str | None = None  # the front's span, for the router (tracing on)


def _error_response(exc: ApiError) -> web.Response:
    return web.json_response(exc.to_openai(), status=exc.status)


def _errors(metrics: FrontMetrics) -> Any:
    @web.middleware
    async def errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except ApiError as exc:
            response = _error_response(exc)
        except web.HTTPException as exc:  # aiohttp's own 404 / 405
            if exc.status < 400:
                raise
            response = _error_response(ApiError(f"{request.method} {request.path}: "
                                                f"{exc.reason}", status=exc.status,
                                                code=str(exc.status)))
        if request.path.startswith("/v1/") and request.method == "POST":
            status = request.get(_STREAM_STATUS, response.status)
            metrics.requests.labels(endpoint=request.path, status=str(status)).inc()
        return response
    return errors


def _auth(api_key: str | None) -> Any:
    @web.middleware
    async def auth(request: web.Request, handler: _Handler) -> web.StreamResponse:
        if api_key is not None and request.path.startswith("/v1"):
            given = request.headers.get("Authorization", "")
            token = given[7:] if given.startswith("Bearer ") else ""
            if not hmac.compare_digest(token.encode(), api_key.encode()):
                return _error_response(ApiError(
                    "Incorrect API key provided" if token else
                    "You didn't provide an API key (Authorization: Bearer KEY)",
                    status=401, code="invalid_api_key"))
        return await handler(request)
    return auth


class _Front:
    def __init__(self, config: FrontConfig) -> None:
        self.config = config
        self.created = int(time.time())

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.config.deployment.model_id, "object": "model",
                "created": self.created, "owned_by": "pdtrt"}

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        self._check_model(request.match_info["model"])
        return web.json_response(self._model_card())

    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def prometheus(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.config.metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE})

    def _check_model(self, name: str) -> None:
        if name not in self.config.deployment.names:
            raise ApiError(f"The model `{name}` does not exist; this front serves "
                           f"`{self.config.deployment.model_id}`", status=404, param="model",
                           code="model_not_found")

    def _prepare(self, body: ChatBody | CompletionBody, request: web.Request) -> _Prepared:
        self._check_model(body.model)
        tok = self.config.tokenizer
        if isinstance(body, ChatBody):
            sampling = chat_sampling(body)
            prompt = tok.chat([{"role": m.role, "content": m.text(i)}
                               for i, m in enumerate(body.messages)])
            kind, prefix = "chat", "chatcmpl-"
        else:
            sampling = completion_sampling(body)
            prompt = _completion_prompt(body, tok)
            kind, prefix = "completion", "cmpl-"
        max_tokens = self.config.deployment.output_budget(len(prompt), sampling.max_tokens)
        timing = request.headers.get(TIMING_HEADER, "").strip().lower() in ("true", "1")
        return _Prepared(kind, prefix + secrets.token_hex(12), prompt, sampling, max_tokens,
                         timing=timing)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._traced(request, ChatBody)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._traced(request, CompletionBody)

    async def _traced(self, request: web.Request,
                      kind: type[ChatBody] | type[CompletionBody]) -> web.StreamResponse:
        """The request, within its span when tracing is on: ``POST <path>``, child of the
        client's ``traceparent`` header (W3C Trace Context; none or invalid: a new trace),
        whose own ``traceparent`` goes to the router as the request parameter of that name."""
        tracing = self.config.tracing
        if tracing is None:
            return await self._measured(request, self._prepare(
                parse_body(await request.read(), kind), request), generation.Outcome())
        span = tracing.start(f"POST {request.path}", server=True,
                             parent=valid_traceparent(request.headers.get(TRACEPARENT)),
                             attributes={"http.request.method": "POST",
                                         "url.path": request.path})
        outcome = generation.Outcome()
        error = None
        status = 200
        try:
            p = self._prepare(parse_body(await request.read(), kind), request)
            p = dataclasses.replace(p, traceparent=tracing.traceparent(span))
            tracing.annotate(span, {"pdtrt.request_id": p.request_id,
                                    "pdtrt.prompt_tokens": len(p.prompt),
                                    "pdtrt.stream": p.sampling.stream})
            response = await self._measured(request, p, outcome)
            status = request.get(_STREAM_STATUS, response.status)
            return response
        except ApiError as exc:
            error, status = exc.message, exc.status
            raise
        except (asyncio.CancelledError, ConnectionError) as exc:
            error, status = f"the client went away ({type(exc).__name__})", 499
            raise
        finally:
            tracing.end(span, attributes={
                "http.response.status_code": status,
                "pdtrt.output_tokens": outcome.num_completion,
                "pdtrt.finish_reason": outcome.finish_reason}, error=error)

    async def _measured(self, request: web.Request, p: _Prepared,
                        outcome: generation.Outcome) -> web.StreamResponse:
        """:meth:`_serve`, counted in flight, and a hang-up counted as one."""
        metrics = self.config.metrics
        metrics.in_flight.inc()
        outcome.num_prompt = len(p.prompt)
        try:
            return await self._serve(request, p, outcome)
        except (asyncio.CancelledError, ConnectionError):
            metrics.disconnects.inc()
            raise
        finally:
            metrics.in_flight.dec()

    async def _deltas(self, p: _Prepared, outcome: generation.Outcome) -> Any:
        """The request's deltas, each token response timed into the front's histograms."""
        cfg = self.config
        inputs = engine_inputs(p.prompt, p.sampling, max_tokens=p.max_tokens,
                               end_id=cfg.tokenizer.eos_id, pad_id=cfg.tokenizer.pad_id,
                               timing=p.timing and cfg.engine.has_timing)
        timer = RequestTimer(cfg.metrics, asyncio.get_running_loop().time)
        deltas = generation.run(cfg.engine, cfg.tokenizer, request_id=p.request_id,
                                inputs=inputs, max_tokens=p.max_tokens, stops=p.sampling.stop,
                                logprobs=p.sampling.logprobs, outcome=outcome,
                                stall_s=cfg.stall_s, traceparent=p.traceparent)
        async with aclosing(deltas):
            async for delta in deltas:
                timer.tokens(len(delta.token_ids))
                yield delta
        timer.finish(num_in=outcome.num_prompt, num_out=outcome.num_completion)

    async def _serve(self, request: web.Request, p: _Prepared,
                     outcome: generation.Outcome) -> web.StreamResponse:
        shape = _Shape(p, self.config.deployment.model_id, int(time.time()),
                       self.config.tokenizer)
        if not p.sampling.stream:
            lps: list[_Scored] = []
            async for delta in self._deltas(p, outcome):
                lps += _scored(delta) or []
            return web.json_response(shape.timed(shape.whole(outcome, lps), outcome))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(data: dict[str, Any] | str) -> None:
            text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
            await response.write(f"data: {text}\n\n".encode())

        try:
            if p.kind == "chat":
                await send(shape.chunk({"role": "assistant", "content": ""}, None, None))
            async for delta in self._deltas(p, outcome):
                if delta.text or delta.logprobs:
                    await send(shape.chunk_of(delta))
            await send(shape.timed(shape.chunk(None, outcome.finish_reason, None), outcome))
            if p.sampling.include_usage:
                await send(shape.usage_chunk(outcome))
        except ApiError as exc:
            log.warning("request %s failed after its stream began: %s", p.request_id,
                        exc.message)
            request[_STREAM_STATUS] = exc.status
            await send(exc.to_openai())
        await send("[DONE]")
        await response.write_eof()
        return response


def _completion_prompt(body: CompletionBody, tok: FrontTokenizer) -> list[int]:
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return [int(x) for x in prompt]
    if isinstance(prompt, list):
        if len(prompt) != 1:
            raise ApiError(f"'prompt' has {len(prompt)} prompts; send one per request",
                           param="prompt")
        prompt = prompt[0]
    if not prompt:
        raise ApiError("'prompt' is empty", param="prompt")
    return tok.encode(str(prompt))


class _Shape:
    """OpenAI's response objects for one request."""

    def __init__(self, p: _Prepared, model: str, created: int, tok: FrontTokenizer) -> None:
        self.p, self.model, self.created, self.tok = p, model, created, tok
        self.chat = p.kind == "chat"
        self.usage_in_chunks = p.sampling.include_usage

    def _head(self, obj: str) -> dict[str, Any]:
        return {"id": self.p.request_id, "object": obj, "created": self.created,
                "model": self.model}

    def _logprobs(self, scored: list[_Scored]) -> dict[str, Any]:
        """OpenAI's ``logprobs`` of a choice: chat ``{"content": [{token, logprob, bytes,
        top_logprobs: [{token, logprob, bytes}, ...]}]}`` (the N best, ``top_logprobs`` N);
        completions ``{tokens, token_logprobs, top_logprobs, text_offset}``, its
        ``top_logprobs`` one ``{text: logprob}`` per token -- the N best and the chosen token,
        so up to N + 1 keys, as OpenAI's legacy API documents -- or null when N is 0."""
        text = self.tok.token_text
        texts = [text(t) for t, _, _ in scored]
        if self.chat:
            return {"content": [{**_token(s, lp), "top_logprobs": [
                _token(text(a), alp) for a, alp in top]}
                for s, (_, lp, top) in zip(texts, scored, strict=True)]}
        offsets = [sum(len(s) for s in texts[:i]) for i in range(len(texts))]
        tops = None
        if self.p.sampling.top_logprobs:
            tops = [_top_dict([(text(a), alp) for a, alp in top] + [(s, lp)])
                    for s, (_, lp, top) in zip(texts, scored, strict=True)]
        return {"tokens": texts, "token_logprobs": [lp for _, lp, _ in scored],
                "top_logprobs": tops, "text_offset": offsets}

    def chunk(self, delta: dict[str, Any] | str | None, finish: str | None,
              scored: list[_Scored] | None) -> dict[str, Any]:
        lps = None if scored is None else self._logprobs(scored)
        if self.chat:
            choice = {"index": 0, "delta": delta if isinstance(delta, dict) else {},
                      "logprobs": lps, "finish_reason": finish}
            out = {**self._head("chat.completion.chunk"), "choices": [choice]}
        else:
            choice = {"index": 0, "text": delta if isinstance(delta, str) else "",
                      "logprobs": lps, "finish_reason": finish}
            out = {**self._head("text_completion"), "choices": [choice]}
        if self.usage_in_chunks:
            out["usage"] = None
        return out

    def chunk_of(self, delta: generation.Delta) -> dict[str, Any]:
        return self.chunk({"content": delta.text} if self.chat else delta.text, None,
                          _scored(delta))

    def timed(self, out: dict[str, Any], outcome: generation.Outcome) -> dict[str, Any]:
        """``out`` with the request's timing, when it asked (:data:`TIMING_HEADER`)."""
        return {**out, TIMING_FIELD: outcome.timing} if self.p.timing else out

    def usage_chunk(self, outcome: generation.Outcome) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {**self._head(obj), "choices": [], "usage": outcome.usage}

    def whole(self, outcome: generation.Outcome, scored: list[_Scored]) -> dict[str, Any]:
        text = "".join(outcome.text)
        lps = self._logprobs(scored) if self.p.sampling.logprobs else None
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": lps, "finish_reason": outcome.finish_reason}
            head = self._head("chat.completion")
        else:
            choice = {"index": 0, "text": text, "logprobs": lps,
                      "finish_reason": outcome.finish_reason}
            head = self._head("text_completion")
        return {**head, "choices": [choice], "usage": outcome.usage}


_Scored = tuple[int, float, TopLogProbs]  # an output token, its log-probability, alternatives


def _scored(delta: generation.Delta) -> list[_Scored] | None:
    """The delta's tokens with their log-probabilities and alternatives (none asked: none;
    a token the engines sent no alternatives for has an empty tuple)."""
    if delta.logprobs is None:
        return None
    top = delta.top or []
    return [(t, lp, top[i] if i < len(top) else ())
            for i, (t, lp) in enumerate(zip(delta.token_ids, delta.logprobs, strict=False))]


def _token(text: str, logprob: float) -> dict[str, Any]:
    """One chat log-prob entry: the token's text, log-probability and UTF-8 bytes."""
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def _top_dict(pairs: list[tuple[str, float]]) -> dict[str, float]:
    """Text -> log-probability, the first of two tokens that read the same kept."""
    out: dict[str, float] = {}
    for text, logprob in pairs:
        out.setdefault(text, logprob)
    return out


def make_app(config: FrontConfig) -> web.Application:
    front = _Front(config)
    app = web.Application(middlewares=[_errors(config.metrics), _auth(config.api_key)],
                          client_max_size=16 * 2**20)
    app.router.add_get("/health", front.health)
    app.router.add_get("/metrics", front.prometheus)
    app.router.add_get("/v1/models", front.models)
    app.router.add_get("/v1/models/{model:.+}", front.model)
    app.router.add_post("/v1/completions", front.completions)
    app.router.add_post("/v1/chat/completions", front.chat)
    return app
