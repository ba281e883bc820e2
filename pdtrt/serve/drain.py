"""``pdtrt drain``: drain engine models of a running server, and wait until they are drained.

Each model is sent a drain request (:class:`~pdtrt.runtime.request_parsing.DrainRequest`, over
gRPC, with :func:`~pdtrt.client.streams.probe_inputs`): from then on it takes no new requests --
routers see it draining at their next probe and choose it no more -- and finishes those in
flight. :func:`drain` starts every model's drain first (so the pool shrinks at once), then asks
each for its state every ``poll_s`` until all are drained (:class:`~pdtrt.runtime.engine.drain.
DrainState`), or raises :class:`~pdtrt.errors.DrainTimeoutError` naming what is left. ``resume``
ends a drain: the routers re-admit the model at their next probe. Which models a repository has
that answer drain requests: :func:`drainable_models` (pdtrt's engine models).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pdtrt.client.streams import GrpcStreamClient, StreamClient, probe_inputs
from pdtrt.engine_io import DRAIN_OUTPUT, DRAIN_PARAMETER, DrainAction
from pdtrt.errors import DrainTimeoutError, RequestError
from pdtrt.repo.pbtxt import parse_config
from pdtrt.runtime.engine.drain import DrainState

__all__ = ["DrainState", "ask", "drain", "drainable_models"]

DRAIN_ID_PREFIX = "pdtrt-drain-"
_ASK_TIMEOUT_S = 10.0


def drainable_models(repository: Path) -> list[str]:
    """The models of ``repository`` that answer drain requests (their config has
    :data:`~pdtrt.engine_io.DRAIN_OUTPUT`), by name."""
    names = []
    for config in sorted(repository.glob("*/config.pbtxt")):
        parsed = parse_config(config.read_text())
        if any(o.name == DRAIN_OUTPUT for o in parsed.output):
            names.append(parsed.name or config.parent.name)
    return names


async def ask(client: StreamClient, model: str, action: DrainAction) -> DrainState:
    """Send ``model`` one drain request; its answer. Raises :class:`RequestError` when it
    answers with an error (e.g. it is no pdtrt engine model) or not within 10 s."""
    async def once() -> DrainState:
        stream = client.stream(model, probe_inputs(),
                               request_id=DRAIN_ID_PREFIX + secrets.token_hex(6),
                               parameters={DRAIN_PARAMETER: action.value},
                               outputs=[DRAIN_OUTPUT])
        async for r in stream:
            if r.error is not None:
                raise RequestError(f"{model}: {r.error}",
                                   hint="only pdtrt's engine models (prefill, decode, "
                                   "aggregated endpoints) can be drained")
            if DRAIN_OUTPUT in r.outputs:
                raw = r.outputs[DRAIN_OUTPUT].reshape(-1)[0]
                return DrainState.from_json(raw.decode() if isinstance(raw, bytes) else raw)
        raise RequestError(f"{model} answered the drain request without its state")

    try:
        return await asyncio.wait_for(once(), _ASK_TIMEOUT_S)
    except TimeoutError:
        raise RequestError(f"{model} did not answer a drain request within "
                           f"{_ASK_TIMEOUT_S:g} s") from None


def drain(url: str, models: Sequence[str], *, action: DrainAction = DrainAction.DRAIN,
          timeout_s: float = 60.0, poll_s: float = 0.5,
          on_progress: Callable[[dict[str, DrainState]], None] = lambda _s: None,
          client: StreamClient | None = None) -> dict[str, DrainState]:
    """Start (or, with ``resume`` / ``status``, end or only read) the drain of ``models`` at the
    gRPC ``url``; for a drain, wait until every one is drained, telling ``on_progress`` each
    state seen. Returns each model's last state; raises :class:`DrainTimeoutError` when one is
    not drained after ``timeout_s`` seconds, :class:`RequestError` when one refuses."""
    return asyncio.run(_drain(client or GrpcStreamClient(url), list(models), action,
                              timeout_s, poll_s, on_progress))


async def _drain(client: StreamClient, models: list[str], action: DrainAction,
                 timeout_s: float, poll_s: float,
                 on_progress: Callable[[dict[str, DrainState]], None]) -> dict[str, DrainState]:
    deadline = time.monotonic() + timeout_s
    states = await _ask_all(client, models, action)
    on_progress(states)
    while action is DrainAction.DRAIN and not all(s.drained for s in states.values()):
        if time.monotonic() >= deadline:
            left = ", ".join(f"{m} ({s.num_in_flight} in flight, {s.num_held} KV held)"
                             for m, s in states.items() if not s.drained)
            raise DrainTimeoutError(f"not drained after {timeout_s:g} s: {left}",
                                    hint="wait longer (--timeout), or stop the server: its "
                                    "requests in flight then end with an error")
        await asyncio.sleep(poll_s)
        states = await _ask_all(client, models, DrainAction.STATUS)
        on_progress(states)
    return states


async def _ask_all(client: StreamClient, models: list[str],
                   action: DrainAction) -> dict[str, DrainState]:
    answers = await asyncio.gather(*(ask(client, m, action) for m in models))
    return dict(zip(models, answers, strict=True))
