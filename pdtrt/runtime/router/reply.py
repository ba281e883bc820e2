"""The client's side of one routed request: each output token once, and exactly one final
response.

Phases report their tokens by position -- a decode stream starts again with the prefill's
first token -- and :class:`Reply` keeps each position once. When the router retries a phase
on another endpoint, the reply forgets what the client has not been sent
(:meth:`Reply.rollback`), and a position the client *has* been sent must come back with the
same token, or the request ends with an error instead of a changed or repeated token.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from pdtrt.engine_io import TIMING_OUTPUT, TopLogProbs, top_log_prob_outputs
from pdtrt.errors import PhaseError
from pdtrt.runtime.metrics import Metrics
from pdtrt.runtime.request_parsing import RouterRequest, TokenCounts
from pdtrt.runtime.router.timeline import Timeline
from pdtrt.runtime.router.timing import timing_json
from pdtrt.runtime.triton_io import (
    Incoming,
    Triton,
    count_outputs,
    log_prob_outputs,
    token_outputs,
)

if TYPE_CHECKING:
    from pdtrt.runtime.router.trace import RequestTrace

__all__ = ["Reply"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# The least time between two asks whether a client cancelled (see Reply.cancelled): at most
# this much more of a cancelled request is generated and relayed.
CANCEL_CHECK_S = 0.1


class Reply:
    """What one client has been sent, and the one final response that ends it.

    ``clock`` (seconds) times the cancel checks and the time to first token; ``start_s`` is
    when the request came, on that clock.
    """

    def __init__(self, triton: Triton, incoming: Incoming, metrics: Metrics,
                 start_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.triton, self.incoming, self.metrics, self.start_s = triton, incoming, metrics, start_s
        self.clock = clock
        self.tokens: list[int] = []  # the output so far, each position once
        self.logprobs: list[float] | None = None  # theirs, when the phases report them
        self.top: list[TopLogProbs] | None = None  # their alternatives, likewise
        self.counts = TokenCounts()  # the token counts the client asked for
        self.num_prompt = 0  # its prompt's tokens
        self.num_streamed = 0  # of which already sent (streaming)
        self.done = False  # the final response went out
        self.ended_s: float | None = None  # when it went out (the router span's end)
        self._cancelled = False
        self.timeline = Timeline(arrived_s=start_s)  # where its time went
        self.trace: RequestTrace | None = None  # its spans, when tracing is on
        self._asked_s = -math.inf  # when Triton was last asked whether the client cancelled

    def cancelled(self, *, now: bool = False) -> bool:
        """Whether the client has cancelled the request.

        Triton is asked at most once per :data:`CANCEL_CHECK_S` (``now``: at once): each ask
        is a round trip to the server through the stub's shared memory, and this is asked for
        every relayed response. So a cancel is seen at the first response at least
        :data:`CANCEL_CHECK_S` after the last ask; the few tokens relayed meanwhile go to a
        stream its client no longer reads. A cancel is for good, so a yes is kept.
        """
        if self._cancelled:
            return True
        t = self.clock()
        if now or t - self._asked_s >= CANCEL_CHECK_S:
            self._asked_s = t
            self._cancelled = self.triton.is_cancelled(self.incoming)
        return self._cancelled

    @property
    def stopped(self) -> bool:
        """The client cancelled or stopped it, as far as known (no round trip to the server)."""
        return self._cancelled

    def stop(self) -> None:
        """A stop request for this request came: from now on it counts as cancelled."""
        self._cancelled = True

    def extend(self, position: int, tokens: Sequence[int],
               logprobs: Sequence[float] | None = None,
               top: Sequence[TopLogProbs] | None = None) -> None:
        """Tokens of the output from ``position`` on (with their log-probabilities and those
        of their alternatives, when the phase reports them); positions already known are
        dropped.

        Raises :class:`PhaseError` when a known position comes with another token (a retried
        phase that sampled differently): the client must not get a changed output.
        """
        known = max(0, len(self.tokens) - position)
        for i, token in enumerate(tokens[:known]):
            if token != self.tokens[position + i]:
                raise PhaseError(
                    f"a retried phase gave token {token} at position {position + i}, where the "
                    f"output already has {self.tokens[position + i]}; ending the request rather "
                    "than changing it")
        self.tokens += tokens[known:]
        if logprobs is not None:  # by position: a phase may report ones another did not
            self.logprobs = _by_position(self.logprobs, position, logprobs)
        if top is not None:
            self.top = _by_position(self.top, position, top)

    def rollback(self) -> None:
        """Forget the tokens not sent to the client yet (a phase is about to be retried)."""
        del self.tokens[self.num_streamed:]
        if self.logprobs is not None:
            del self.logprobs[self.num_streamed:]
        if self.top is not None:
            del self.top[self.num_streamed:]

    def stream(self) -> None:
        """Send the tokens not sent yet, if any, as one (non-final) response."""
        new = self.tokens[self.num_streamed:]
        if new:
            self.triton.send(self.incoming, self._outputs(new, self.num_streamed))
            self._tokens_out()
            self.num_streamed = len(self.tokens)

    def finish(self, request: RouterRequest) -> None:
        """The final response: the unsent rest (streaming) or the whole output, with the
        request's timing when it asked (computed now, so it is complete when the response
        goes out; :mod:`~pdtrt.runtime.router.timing`)."""
        timing: dict[str, np.ndarray] = {}
        self.ended_s = self.clock()
        if request.return_timing:
            text = timing_json(self.timeline, now_s=self.ended_s, num_out=len(self.tokens))
            timing = {TIMING_OUTPUT: np.array([[text.encode()]], dtype=object)}
        if not request.streaming:
            full = self.tokens if request.exclude_input else [*request.client_prompt,
                                                               *self.tokens]
            self.triton.send(self.incoming, {**self._outputs(full, 0), **timing}, final=True)
            self.timeline.token_out(self.clock())  # no streamed TTFT: it is the whole answer
        elif rest := self.tokens[self.num_streamed:]:
            self.triton.send(self.incoming, {**self._outputs(rest, self.num_streamed),
                                             **timing}, final=True)
            self._tokens_out()
        elif timing:  # the timing, with no tokens: an empty output_ids, not none, because the
            # ensemble runs postprocessing on every response of this step and fails one that
            # lacks its inputs ("expected 2 inputs but got 0"; Triton 2.51, measured)
            self.triton.send(self.incoming, {**token_outputs([]), **timing}, final=True)
        else:
            self.triton.close(self.incoming)
        self.done = True

    def _outputs(self, tokens: Sequence[int], start: int) -> dict[str, np.ndarray]:
        """A response with ``tokens``, and the log-probabilities of the output's tokens from
        ``start`` on (and their alternatives) when the phases reported them (never of the
        prompt)."""
        counts = count_outputs(*self.counts.of(self.num_prompt, len(tokens)))
        if self.logprobs is None:
            return {**token_outputs(tokens), **counts}
        rows = None if self.top is None else self.top[start:]
        top = {} if rows is None else top_log_prob_outputs(
            rows, max((len(row) for row in rows), default=0))
        return {**token_outputs(tokens), **counts,
                **log_prob_outputs(self.logprobs[start:], sum(self.logprobs)), **top}

    def close(self) -> None:
        """An empty final response (the client has gone)."""
        self.ended_s = self.clock()
        self.triton.close(self.incoming)
        self.done = True

    def fail(self, message: str) -> None:
        """End the request with an error, unless it has ended already."""
        if self.done:
            log.warning("request %r already ended; not sent: %s", self.incoming.request_id,
                        message)
            return
        self.done = True
        self.ended_s = self.clock()
        try:
            self.triton.send_error(self.incoming, message)
        except Exception:  # nothing is left to tell the client with
            log.exception("cannot send the error of request %r: %s", self.incoming.request_id,
                          message)

    def _tokens_out(self) -> None:
        """Streamed tokens went out: marked on the timeline; the first ones are the TTFT."""
        self.timeline.token_out(self.clock())
        if self.num_streamed == 0:
            assert self.timeline.first_token_s is not None
            self.metrics.add("ttft_s", self.timeline.first_token_s - self.start_s)


def _by_position(known: list[T] | None, position: int, values: Sequence[T]) -> list[T]:
    """``known`` (None: nothing yet) with those of ``values`` -- the output's from
    ``position`` on -- that extend it; a position it has keeps its value."""
    known = [] if known is None else known
    for at, value in enumerate(values, position):
        if at == len(known):
            known.append(value)
    return known
