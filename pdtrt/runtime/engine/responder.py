"""One request of the LLM-API engine model: LLM-API results in, Triton responses out, one final.

:class:`Responder` turns the steps of one ``generate_async`` result (cumulative
``outputs[0].token_ids``; ``finished``; ``finish_reason``; a context-only request's
``disaggregated_params``) into the ``tensorrt_llm`` model's responses: streaming, one response per
step with the new tokens; otherwise one response with the whole output (and the prompt unless
``exclude_input_in_output``); timing outputs; ``context_phase_params`` on a context-only final.
Exactly one final response goes out, whatever happens: the end of the result, an error
(:meth:`Responder.fail`: before data an error response; after data the in-band error then the
final flag -- the reasons are in ``_fail``), or the server draining. Its methods run on the
engine model's event-loop thread and on Triton's threads (stop, drain), one at a time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Protocol

import numpy as np

from pdtrt.engine_io import ERROR_OUTPUT, RequestType, TopLogProbs, top_log_prob_outputs
from pdtrt.runtime.engine.inflight import StopHandle
from pdtrt.runtime.metrics import Metrics
from pdtrt.runtime.phase_params import ContextPhaseParams
from pdtrt.runtime.request_parsing import EngineRequest
from pdtrt.runtime.triton_io import (
    Incoming,
    Triton,
    count_outputs,
    log_prob_outputs,
    token_outputs,
)

__all__ = ["DECODE_FOLLOWS", "Responder", "ResponderOwner"]

log = logging.getLogger(__name__)

# The finish reasons of a context-only result after which the generation request follows.
# TensorRT-LLM's disaggregated server sends the generation request only when the context
# response's finish_reason is "length" or "not_finished" (tensorrt_llm/serve/
# openai_disagg_server.py, _send_context_request, at 4c05a74891e4df8066f08ed4ce14b0972abe4e25);
# "stop" (the first token was the end id) ends the request at the prefill.
DECODE_FOLLOWS = ("length", "not_finished")


class ResponderOwner(Protocol):
    """What a responder needs of the engine model that made it
    (:class:`pdtrt.runtime.engine.model.TritonPythonModel` is one)."""

    triton: Triton
    metrics: Metrics

    def publish(self) -> None: ...

    def offered(self, request_id: str) -> None: ...

    def ended(self, out: Responder) -> None: ...


class Responder:
    def __init__(self, model: ResponderOwner, incoming: Incoming, request: EngineRequest, *,
                 arrival_ns: int, handle: StopHandle) -> None:
        self.model, self.triton, self.incoming = model, model.triton, incoming
        self.request, self.arrival_ns, self.handle = request, arrival_ns, handle
        self._lock = threading.Lock()
        self.result: Any = None  # the LLM API's RequestOutput, once submitted
        self.submitted_ns = 0
        self.first_token_ns = 0
        self.num_seen = 0  # tokens of outputs[0].token_ids already taken
        self.tokens: list[int] = []
        self.logprobs: list[float] = []  # of ``tokens``, when the request asked for them
        self.top: list[TopLogProbs] = []  # their alternatives, when it asked for those too
        self.done = False  # the final response went out
        self.sent = False  # a response with data went out
        self.held = False  # the server is stopping: only the error goes out
        self.aborted = False
        self.trace_parent: str | None = None  # its caller's traceparent, when traced
        self.error: str | None = None  # why it failed, if it did

    # -- control -----------------------------------------------------------------------------
    def attach(self, result: Any) -> None:
        """``generate_async`` returned ``result``; abort it at once if stopped meanwhile."""
        with self._lock:
            self.result = result
            self.submitted_ns = time.time_ns()
        if self.handle.stopped:
            self.abort()

    def abort(self) -> None:
        """Stop the request in the engine (once); its final step then comes as 'cancelled'."""
        with self._lock:
            if self.aborted or self.result is None or self.done:
                return
            self.aborted = True
            result = self.result
        result.abort()

    def client_gone(self) -> bool:
        """The client cancelled. Triton is not asked once the final is out: its response
        factory is gone then, and asking crashes the server (SIGSEGV in
        ``TRITONBACKEND_ResponseFactoryIsCancelled``) -- hence the lock the final takes too."""
        with self._lock:
            return not self.done and self.triton.is_cancelled(self.incoming)

    def hold(self) -> None:
        """Send nothing more but the error :meth:`fail` will send."""
        with self._lock:
            self.held = True
            self.handle.stopped = True

    def fail(self, message: str) -> None:
        with self._lock:
            self._fail(message)

    # -- results -----------------------------------------------------------------------------
    def update(self, result: Any) -> None:
        """One step of the result: send what is new; the final response when finished."""
        with self._lock:
            if self.done or self.held:
                return
            out = result.outputs[0]
            new = list(out.token_ids[self.num_seen:])
            if self.request.sampling.return_log_probs:
                values, top = self._logprobs(out, self.num_seen, new)
                self.logprobs += values
                self.top += top
            self.num_seen += len(new)
            if new and not self.first_token_ns:
                self.first_token_ns = time.time_ns()
            self._emit(new, final=bool(result.finished), out=out)

    def _logprobs(self, out: Any, start: int, new: list[int]
                  ) -> tuple[list[float], list[TopLogProbs]]:
        """The log-probabilities of the ``new`` tokens at ``start`` and their alternatives (the
        best ``num_top_log_probs`` of each entry; none asked: empty), from
        ``outputs[0].logprobs``: one ``{token: Logprob}`` per output token that has one. A
        generation-only request's first tokens take the context phase's, carried in
        ``context_phase_params``: a release without ``DisaggregatedParams.first_gen_log_probs``
        has none for them, so its list is that much shorter at the front and is read aligned
        to the end of ``token_ids``. A sampled token missing from its entry (upstream's entry
        is the top-k of the logits, which may not hold it) is NaN, logged, never a failed
        request."""
        k = self.request.sampling.num_top_log_probs
        first = self.request.context_phase_params
        given = first.first_gen_log_probs if first is not None else None
        given_top = first.first_gen_top_log_probs if first is not None else None
        offset = len(out.token_ids) - len(out.logprobs or ())
        values: list[float] = []
        top: list[TopLogProbs] = []
        for i, token in enumerate(new, start):
            if given is not None and i < len(given):
                values.append(given[i])
                if k:
                    top.append(given_top[i] if given_top is not None else ())
                continue
            entry = out.logprobs[i - offset] if 0 <= i - offset < len(out.logprobs) else {}
            if k:
                top.append(_alternatives(entry, k))
            if token not in entry:
                log.warning("request %s: no log-probability for its token %d at %d; NaN sent",
                            self.request.request_id, token, i)
                values.append(math.nan)
                continue
            values.append(_value(entry[token]))
        return values, top

    def _emit(self, new: list[int], *, final: bool, out: Any) -> None:
        num_before = len(self.tokens)
        self.tokens += new
        extra: dict[str, np.ndarray] = {}
        if final:
            self.done = True
            self.model.ended(self)
            if out.finish_reason == "cancelled" or self.handle.stopped:
                self.model.metrics.add("cancelled", 1)
            self.model.metrics.add("requests", 1)
            if self.request.mode is not RequestType.GENERATION_ONLY and self.submitted_ns:
                self.model.metrics.add("prompt_tokens", len(self.request.prompt))
            if self.submitted_ns:
                self.model.metrics.add("queue_s", (self.submitted_ns - self.arrival_ns) / 1e9)
            if self.request.mode is RequestType.CONTEXT_ONLY and \
                    out.disaggregated_params is not None and \
                    out.finish_reason in DECODE_FOLLOWS and self.tokens:
                self.model.offered(self.request.request_id)  # held until its timeout
                if not self.handle.stopped:  # stopped as it finished: nobody will pull it
                    extra = self._offer(out.disaggregated_params)
            self.model.publish()  # before the final response: a client may look
        if self.request.streaming:
            if new or extra:
                self.triton.send(self.incoming, {**token_outputs(new), **self._timing(),
                                                 **self._logprob_outputs(num_before),
                                                 **self._counts(len(new)), **extra},
                                 final=final)
                self.sent = True
            elif final:
                self.triton.close(self.incoming)
        elif final:
            prompt = [] if self.request.exclude_input else list(self.request.prompt)
            self.triton.send(self.incoming, {**token_outputs(prompt + self.tokens),
                                             **self._timing(), **self._logprob_outputs(0),
                                             **self._counts(len(prompt) + len(self.tokens)),
                                             **extra}, final=True)

    def _counts(self, response_tokens: int) -> dict[str, np.ndarray]:
        """NVIDIA's token counts, as its ``tensorrt_llm`` model sends them: the prompt's and
        this response's tokens, each only when asked."""
        return count_outputs(*self.request.counts.of(len(self.request.prompt), response_tokens))

    def _logprob_outputs(self, start: int) -> dict[str, np.ndarray]:
        """``output_log_probs`` of the tokens from ``start`` on ([1, 1, n]: one beam) and
        ``cum_log_probs`` of all so far ([1, 1]), as NVIDIA's ``tensorrt_llm`` model sends
        them: only to a request that asked (``return_log_probs``); and the tokens'
        alternatives ([1, n, k]: :data:`~pdtrt.engine_io.TOP_LOG_PROBS_OUTPUT` and its ids)
        when it asked for k of them."""
        sampling = self.request.sampling
        if not sampling.return_log_probs:
            return {}
        top = top_log_prob_outputs(self.top[start:], sampling.num_top_log_probs) \
            if sampling.num_top_log_probs else {}
        return {**log_prob_outputs(self.logprobs[start:], sum(self.logprobs)), **top}

    def _offer(self, params: Any) -> dict[str, np.ndarray]:
        """The ``context_phase_params`` output: what a decode needs to pull the KV."""
        sampling = self.request.sampling
        encoded = ContextPhaseParams.from_disaggregated(
            params, len(self.request.prompt),
            tuple(self.logprobs) if sampling.return_log_probs else None,
            tuple(self.top) if sampling.return_log_probs and sampling.num_top_log_probs
            else None)
        return {"context_phase_params": encoded.to_array().reshape(1, -1)}

    def _timing(self) -> dict[str, np.ndarray]:
        values = {"arrival_time_ns": self.arrival_ns, "first_scheduled_time_ns": self.submitted_ns,
                  "first_token_time_ns": self.first_token_ns, "last_token_time_ns": time.time_ns()}
        return {k: np.array([[v]], dtype=np.int64) for k, v in values.items()}

    def _fail(self, message: str) -> None:
        if self.done:
            return
        self.done = True
        self.error = message
        self.model.ended(self)
        self.model.metrics.add("failed", 1)
        self.model.publish()
        wanted = self.incoming.requested_outputs
        if not self.sent or (wanted and ERROR_OUTPUT not in wanted):
            # Before data, or a caller that did not ask for the in-band error (an ensemble
            # step): one error response that ends the request. An ensemble runs its next step
            # for every response, so an in-band one would reach the postprocessing empty; and
            # Triton 2.51's ensemble never completes a request whose step sent its error and
            # its final flag apart (measured).
            self.triton.send_error(self.incoming, message)
            return
        # After data, Triton 2.51's BLS drops an error response (and an error response flagged
        # final never ends the caller's stream): the message goes in-band, then the final flag
        # on its own. The error response goes only to a caller that did not name its outputs
        # (a gRPC client): sent to a BLS caller, it also kept that caller's stream from ever
        # ending, and its stub from finalizing (measured).
        text = np.array([[message.encode()]], dtype=object)
        self.triton.send(self.incoming, {ERROR_OUTPUT: text})
        if not wanted:
            self.triton.send_error(self.incoming, message, final=False)
        self.triton.close(self.incoming)


def _value(logprob: Any) -> float:
    """The log-probability of one entry's value (a ``Logprob``, or a bare float)."""
    return float(getattr(logprob, "logprob", logprob))


def _alternatives(entry: dict[int, Any], k: int) -> TopLogProbs:
    """The ``k`` best of one token's ``{token: Logprob}`` entry, best first: upstream's entry
    holds the top-k ranked 1..k, and may also hold the chosen token outside them."""
    ranked = sorted(entry.items(), key=lambda kv: (-_value(kv[1]),
                                                   getattr(kv[1], "rank", None) or 0))
    return tuple((int(t), _value(v)) for t, v in ranked[:k])
