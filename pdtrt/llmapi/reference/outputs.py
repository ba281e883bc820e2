"""The reference ``RequestOutput`` / ``CompletionOutput``: what ``generate_async`` returns.

Upstream (``tensorrt_llm/executor/result.py`` at 005bc848893f575ec14b45d6b13139360d67c790, and
``RequestOutput`` in ``tensorrt_llm/llmapi/llm.py``) the result is an async iterator: each
``__anext__`` takes one executor response and folds it into ``outputs[0]`` (``token_ids`` grow
cumulatively, ``token_ids_diff`` is what the last step added), ``finished`` turns true on the
final one, ``aresult()`` waits for it, and an engine error surfaces as an exception from the
iteration. ``abort()`` asks the executor to stop the request and marks it ``aborted()``. The
reference keeps those semantics; its responses come from the scheduler thread, so a step is
handed over under a lock and wakes the event loop that created the result.

With ``SamplingParams.return_perf_metrics`` the final step sets ``outputs[0].request_perf_metrics``:
upstream the executor's ``RequestPerfMetrics``, whose ``timing_metrics`` hold steady-clock
times as ``datetime.timedelta`` (``arrival_time``, ``first_scheduled_time``, ``first_token_time``,
``last_token_time``, ``kv_cache_transfer_start`` / ``_end``) and ``kv_cache_size``, the bytes of
a generation-only request's KV transfer (0: none) -- as TensorRT-LLM's OpenAI server reads them
(``tensorrt_llm/serve/openai_server.py``, its perf-metrics records: ``.total_seconds()``, and the
KV fields only when ``kv_cache_size > 0``). The reference fills the times it knows (arrival,
first and last token, the KV pull and its bytes); ``first_scheduled_time`` stays 0, unset, as
an unset C++ time point reads upstream. It has no ``kv_cache_metrics`` or
``speculative_decoding`` parts.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import NamedTuple

from pdtrt.llmapi.reference.params import DisaggregatedParams

__all__ = ["CompletionOutput", "ExecutorResponse", "Logprob", "PerfMarks", "RequestError",
           "RequestOutput", "RequestPerfMetrics", "TimingMetrics"]


class Logprob(NamedTuple):
    """One token's log-probability and its rank in the distribution it was drawn from
    (upstream: ``tensorrt_llm/executor/result.py``)."""

    logprob: float
    rank: int | None = None


def steady_now() -> timedelta:
    """Now on the steady clock (``CLOCK_MONOTONIC``: C++ ``steady_clock`` on Linux, Python's
    ``time.monotonic``), as pybind11 hands a steady time point to Python."""
    return timedelta(microseconds=time.monotonic_ns() / 1000)


@dataclass(frozen=True, kw_only=True)
class TimingMetrics:
    arrival_time: timedelta = timedelta(0)
    first_scheduled_time: timedelta = timedelta(0)
    first_token_time: timedelta = timedelta(0)
    last_token_time: timedelta = timedelta(0)
    kv_cache_transfer_start: timedelta = timedelta(0)
    kv_cache_transfer_end: timedelta = timedelta(0)
    kv_cache_size: int = 0  # bytes of a generation-only request's KV transfer


@dataclass(frozen=True)
class RequestPerfMetrics:
    timing_metrics: TimingMetrics


@dataclass
class PerfMarks:
    """What one request's ``RequestPerfMetrics`` will say, marked as it runs (any thread)."""

    arrival: timedelta
    first_token: timedelta = timedelta(0)
    last_token: timedelta = timedelta(0)
    kv_start: timedelta = timedelta(0)
    kv_end: timedelta = timedelta(0)
    kv_size: int = 0

    def tokens(self) -> None:
        self.last_token = steady_now()
        if not self.first_token:
            self.first_token = self.last_token

    def metrics(self) -> RequestPerfMetrics:
        return RequestPerfMetrics(TimingMetrics(
            arrival_time=self.arrival, first_token_time=self.first_token,
            last_token_time=self.last_token, kv_cache_transfer_start=self.kv_start,
            kv_cache_transfer_end=self.kv_end, kv_cache_size=self.kv_size))


class RequestError(RuntimeError):
    """One request failed in the engine (upstream: ``tensorrt_llm.executor.RequestError``)."""


@dataclass(slots=True)
class CompletionOutput:
    index: int
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # stop | length | timeout | cancelled
    stop_reason: int | str | None = None
    disaggregated_params: DisaggregatedParams | None = None
    logprobs: list[dict[int, Logprob]] = field(default_factory=list)  # one per token, if asked
    cumulative_logprob: float | None = None
    request_perf_metrics: RequestPerfMetrics | None = None  # final, when asked
    _last_token_ids_len: int = field(default=0, init=False, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len:]


@dataclass(frozen=True, kw_only=True)
class ExecutorResponse:
    """One response of the reference executor to one request."""

    tokens: tuple[int, ...]  # new tokens
    final: bool
    finish_reason: str | None = None
    disaggregated_params: DisaggregatedParams | None = None
    error: str | None = None
    logprobs: tuple[dict[int, Logprob], ...] | None = None  # of ``tokens``, when asked
    stop_reason: int | str | None = None  # the stop word that ended it (final only)
    cut: int = 0  # final: output tokens to drop (the stop word, unless asked to keep it)
    perf_metrics: RequestPerfMetrics | None = None  # final, when asked (return_perf_metrics)


class RequestOutput:
    def __init__(self, request_id: int, prompt_token_ids: list[int], *,
                 on_abort: Callable[[RequestOutput], None]) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.outputs = [CompletionOutput(0)]
        self.finished = False
        self._aborted = False
        self._on_abort = on_abort
        self._executor_done = False  # the executor has pushed the final step
        self._steps: deque[ExecutorResponse] = deque()
        self._cond = threading.Condition()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._wakeup = asyncio.Event()

    # -- the executor side (any thread) ------------------------------------------------------
    def _push(self, step: ExecutorResponse) -> None:
        with self._cond:
            self._steps.append(step)
            self._executor_done = self._executor_done or step.final or step.error is not None
            self._cond.notify_all()
            loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._wakeup.set)
            except RuntimeError:  # the loop has closed: nobody waits any more
                pass

    # -- the caller side ---------------------------------------------------------------------
    def abort(self) -> None:
        """Ask the executor to stop the request; a finished one is not touched (upstream's
        ``abort_request`` ignores it, so a context-only request's held KV stays held)."""
        self._aborted = True
        self._on_abort(self)

    def aborted(self) -> bool:
        return self._aborted

    def _done_in_executor(self) -> bool:
        with self._cond:
            return self._executor_done

    def _apply(self, step: ExecutorResponse) -> None:
        out = self.outputs[0]
        out._last_token_ids_len = len(out.token_ids)
        out.token_ids.extend(step.tokens)
        if step.logprobs is not None:
            out.logprobs.extend(step.logprobs)
            tail = step.tokens[len(step.tokens) - len(step.logprobs):]  # tokens with a value
            out.cumulative_logprob = (out.cumulative_logprob or 0.0) + sum(
                d[t].logprob for t, d in zip(tail, step.logprobs, strict=True))
        self.finished = step.final
        if step.disaggregated_params is not None:
            out.disaggregated_params = step.disaggregated_params
        if step.final:
            out.finish_reason = step.finish_reason
            out.stop_reason = step.stop_reason
            out.request_perf_metrics = step.perf_metrics
            if step.cut:  # upstream _handle_sequence: a matched stop word leaves the output
                del out.token_ids[-step.cut:]
                del out.logprobs[-step.cut:]
        if step.error is not None:
            self.finished = True
            raise RequestError(step.error)

    def _take(self) -> ExecutorResponse | None:
        with self._cond:
            return self._steps.popleft() if self._steps else None

    def __aiter__(self) -> RequestOutput:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        if self._loop is None:  # made outside a loop: steps from now on wake this one
            with self._cond:
                self._loop = asyncio.get_running_loop()
        while (step := self._take()) is None:
            self._wakeup.clear()
            if (step := self._take()) is not None:
                break
            await self._wakeup.wait()
        self._apply(step)
        return self

    async def aresult(self) -> RequestOutput:
        async for _ in self:
            pass
        return self

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until finished (for callers without an event loop)."""
        while not self.finished:
            with self._cond:
                if not self._steps and not self._cond.wait(timeout):
                    raise TimeoutError(f"request {self.request_id} not finished")
                step = self._steps.popleft()
            self._apply(step)
        return self
