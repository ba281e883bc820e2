"""Drive a benchmark run through an :class:`~pdtrt.client.LLMClient`: warm-up, then the
measured requests, open loop (sent at planned arrival times, whatever is in flight) or closed
loop (a fixed number of users, each sending its next request when the last one ends).

Open-loop sends are never skipped or bunched to catch up: a late send is recorded as *lag*
(send minus schedule) and reported, so a generator that cannot keep up shows it. The clock and
sleep are injected; ``on_progress(done, total)`` may run on the client's reader threads.

A trace of conversations (:mod:`pdtrt.bench.conversations`) is played turn by turn instead:
each turn after the previous answer and its think time, with the conversation so far.

Opening a stream costs milliseconds of client time, so streams are opened before the measured
clock starts: closed loop, one per user; open loop, enough for the rate times twice the
longest warm-up end-to-end latency (1 s without warm-up), plus 8. More are opened on demand
(and show up as send lag).
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pdtrt.bench.conversations import Conversation
from pdtrt.bench.records import RequestRecord
from pdtrt.bench.workload import PlannedRequest, RequestPlan
from pdtrt.client import GenerateRequest, GenerateResult, LLMClient
from pdtrt.errors import BenchError
from pdtrt.workload.arrivals import LoopKind

__all__ = ["RunPlan", "run_plan"]

WARMUP_INDEX_BASE = 1_000_000_000  # warm-up requests are drawn apart from the measured ones


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    model: str
    workload: RequestPlan
    loop: LoopKind
    arrivals_s: tuple[float, ...] = ()  # open loop: planned send times from the start
    concurrency: int = 1  # closed loop: users; also the warm-up's concurrency
    num_requests: int | None = None  # closed loop: bound (with or instead of duration_s)
    duration_s: float | None = None
    num_warmup: int = 0
    timeout_s: float = 60.0
    stream: bool = True
    ignore_eos: bool = False  # every request runs to its max_tokens (GenerateRequest)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise BenchError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.loop is LoopKind.CLOSED and self.num_requests is None and \
                self.duration_s is None:
            raise BenchError("a closed-loop run needs a bound: a request count or a duration")

    @property
    def total(self) -> int | None:
        """Requests the run will send, where known (open-loop arrivals of conversations are
        conversation starts, not requests)."""
        if self.loop is LoopKind.OPEN and not self.workload.conversations:
            return len(self.arrivals_s)
        return self.num_requests


class _Collector:
    def __init__(self, total: int | None, on_progress: Callable[[int, int | None], None] | None):
        self.results: list[tuple[PlannedRequest, GenerateResult, bool, float | None]] = []
        self.total = total
        self.on_progress = on_progress
        self.lock = threading.Lock()
        self.in_flight = 0
        self.idle = threading.Condition(self.lock)

    def started(self) -> None:
        with self.lock:
            self.in_flight += 1

    def done(self, planned: PlannedRequest, result: GenerateResult, warmup: bool,
             scheduled_s: float | None) -> None:
        with self.lock:
            self.results.append((planned, result, warmup, scheduled_s))
            self.in_flight -= 1
            self.idle.notify_all()
            num_done = sum(not w for _, _, w, _ in self.results)
        if not warmup and self.on_progress is not None:
            self.on_progress(num_done, self.total)

    def wait_idle(self) -> None:
        with self.lock:
            while self.in_flight:
                self.idle.wait(0.1)


def _play_conversations(plan: RunPlan, chats: tuple[Conversation, ...],
                        send: Callable[[PlannedRequest], GenerateResult], *,
                        clock: Callable[[], float], sleep: Callable[[float], None],
                        t0_s: float) -> None:
    """Multi-turn conversations (:mod:`pdtrt.bench.conversations`): closed loop, each of
    ``concurrency`` users plays one conversation after another (cycling through them); open
    loop, conversation ``i`` starts at arrival ``i``. Each turn waits for the previous answer
    and its think time. The run's bound (request count, duration) stops new turns."""
    lock = threading.Lock()
    sent = itertools.count()
    cycle = itertools.cycle(chats)

    def next_index() -> int | None:
        with lock:
            i = next(sent)
        if (plan.num_requests is not None and i >= plan.num_requests) or \
                (plan.duration_s is not None and clock() - t0_s >= plan.duration_s):
            return None
        return i

    def play(chat: Conversation) -> bool:
        """False once the run's bound is reached."""
        history: list[str] = []
        for turn in chat.turns:
            if turn.think_s:
                sleep(turn.think_s)
            index = next_index()
            if index is None:
                return False
            planned = plan.workload.turn(chat, turn, history, index)
            result = send(planned)
            if not result.ok:  # its history would be wrong: the conversation ends here
                return True
            history = [planned.prompt, result.text]
        return True

    def user() -> None:
        while True:
            with lock:
                chat = next(cycle)
            if not play(chat):
                return

    if plan.loop is LoopKind.CLOSED:
        players = [threading.Thread(target=user, name=f"pdtrt-bench-user-{u}", daemon=True)
                   for u in range(plan.concurrency)]
        for p in players:
            p.start()
    else:
        players = []
        for i, at_s in enumerate(plan.arrivals_s):
            if plan.duration_s is not None and at_s >= plan.duration_s:
                break
            wait_s = t0_s + at_s - clock()
            if wait_s > 0:
                sleep(wait_s)
            players.append(threading.Thread(target=play, args=(chats[i % len(chats)],),
                                            name=f"pdtrt-bench-chat-{i}", daemon=True))
            players[-1].start()
    for p in players:
        p.join()


def _record(planned: PlannedRequest, result: GenerateResult, *, t0_s: float, warmup: bool,
            scheduled_s: float | None) -> RequestRecord:
    return RequestRecord(
        index=planned.index if not warmup else -(planned.index - WARMUP_INDEX_BASE) - 1,
        model=result.model, request_id=result.request_id, warmup=warmup,
        scheduled_s=scheduled_s, send_s=result.send_time_s - t0_s,
        token_times_s=tuple(c.time_s - t0_s for c in result.chunks),
        # one each is left implicit, so a run without stream_interval reads as before
        tokens_per_response=() if all(c.num_tokens == 1 for c in result.chunks)
        else tuple(c.num_tokens for c in result.chunks),
        end_s=result.end_time_s - t0_s, input_tokens=planned.input_tokens,
        max_tokens=planned.max_tokens, error=result.error,
        error_kind=result.error_kind, conversation=planned.conversation, turn=planned.turn,
        server_timing=result.timing)


def _request(plan: RunPlan, planned: PlannedRequest) -> GenerateRequest:
    """What is sent for ``planned``; the server's timing is asked for wherever the model
    takes the question (the client sends it only then)."""
    return GenerateRequest(prompt=planned.prompt, max_tokens=planned.max_tokens,
                           stream=plan.stream, ignore_eos=plan.ignore_eos,
                           return_timing=True)


def _streams_needed(plan: RunPlan, warmup: list[tuple[PlannedRequest, GenerateResult, bool,
                                                     float | None]]) -> int:
    if plan.loop is LoopKind.CLOSED:
        return plan.concurrency
    if len(plan.arrivals_s) < 2:
        return len(plan.arrivals_s)
    rate_per_s = (len(plan.arrivals_s) - 1) / max(plan.arrivals_s[-1], 1e-9)
    e2e_s = max((r.e2e_s for _, r, _, _ in warmup), default=1.0)
    return min(len(plan.arrivals_s), math.ceil(rate_per_s * 2 * e2e_s) + 8)


def run_plan(client: LLMClient, plan: RunPlan, *, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep,
             on_progress: Callable[[int, int | None], None] | None = None,
             on_measured: Callable[[], None] | None = None) -> list[RequestRecord]:
    """Run ``plan``; returns every request's record (warm-up first). ``on_measured()`` is
    called once the warm-up has ended, before the first measured request. Raises the client's
    errors (server unavailable, unknown model) before sending anything."""
    client.check(plan.model)
    out = _Collector(plan.total, on_progress)
    t0 = [clock()]

    def send(planned: PlannedRequest, *, warmup: bool, scheduled_s: float | None,
             gate: threading.Semaphore | None) -> None:
        def on_done(result: GenerateResult) -> None:
            out.done(planned, result, warmup, scheduled_s)
            if gate is not None:
                gate.release()

        out.started()
        try:
            client.submit(_request(plan, planned), model=plan.model, timeout_s=plan.timeout_s,
                          on_done=on_done)
        except BaseException:
            with out.lock:
                out.in_flight -= 1
            raise

    if plan.num_warmup:
        gate = threading.Semaphore(plan.concurrency)
        for k in range(plan.num_warmup):
            gate.acquire()
            send(plan.workload.request(WARMUP_INDEX_BASE + k), warmup=True, scheduled_s=None,
                 gate=gate)
        out.wait_idle()

    client.open_streams(_streams_needed(plan, out.results))
    if on_measured is not None:
        on_measured()
    t0[0] = clock()
    chats = plan.workload.conversations
    if chats:
        def send_and_wait(planned: PlannedRequest) -> GenerateResult:
            ended: list[GenerateResult] = []
            done = threading.Event()

            def on_done(result: GenerateResult) -> None:
                out.done(planned, result, False, None)
                ended.append(result)
                done.set()

            out.started()
            client.submit(_request(plan, planned), model=plan.model, timeout_s=plan.timeout_s,
                          on_done=on_done)
            done.wait()  # the client ends every request within its timeout
            return ended[0]

        _play_conversations(plan, chats, send_and_wait, clock=clock, sleep=sleep,
                            t0_s=t0[0])
    elif plan.loop is LoopKind.OPEN:
        for i, at_s in enumerate(plan.arrivals_s):
            if plan.duration_s is not None and at_s >= plan.duration_s:
                break
            wait_s = t0[0] + at_s - clock()
            if wait_s > 0:
                sleep(wait_s)
            send(plan.workload.request(i), warmup=False, scheduled_s=at_s, gate=None)
    else:
        gate = threading.Semaphore(plan.concurrency)
        for i in itertools.count():
            if plan.num_requests is not None and i >= plan.num_requests:
                break
            gate.acquire()
            if plan.duration_s is not None and clock() - t0[0] >= plan.duration_s:
                gate.release()
                break
            send(plan.workload.request(i), warmup=False, scheduled_s=None, gate=gate)
    out.wait_idle()
    records = [_record(planned, result, t0_s=t0[0], warmup=warmup, scheduled_s=scheduled_s)
               for planned, result, warmup, scheduled_s in out.results]
    return sorted(records, key=lambda r: (not r.warmup, r.index if not r.warmup else -r.index))
