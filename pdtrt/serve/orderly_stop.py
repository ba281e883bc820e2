"""Stopping a Triton server in order: its models unloaded through the model-control API, tier by
tier, while the server still runs -- so that every Python-backend stub finalizes and exits as
a child of a live server before the server itself is signalled.

Why (issue 49; docs/design/serve.md, "Stubs that outlive their server"): a stub whose server
has exited *and been reaped* takes python_backend r24.10's non-graceful path and segfaults. A
stub that Triton unloaded has run its model's ``finalize()`` and exited; there is nothing left
to outlive the server -- which matters most for a detached server (``pdtrt stop``), whose
parent is init and reaps it the moment it exits.

The tiers: the front first (the readiness marker, the ensembles, the router, the tokenizers),
then the engines and anything else. Triton 2.51's unload returns at once
(the model goes UNLOADING; measured here: its stub exits 1-2 s later), so each tier is waited
for by its stubs leaving, up to a deadline; stubs still running then are SIGKILLed -- while
their server lives -- and logged. The front waits :data:`FRONT_TIER_S` at most, the engines
the rest: a front model Triton itself holds never unloads -- after a router was killed, 2.51
keeps its ensemble requests forever, and they keep the tokenizers loaded -- and waiting it out
cost every stop after such a crash the whole grace (``pdtrt stop`` of the pools example: 67 s,
38 s with the cap; the teardown of tests/serve/test_migration_chaos.py, whose last case kills
the router). This needs explicit model-control mode, the one ``pdtrt serve`` starts Triton in
(:func:`~pdtrt.serve.model_control.explicit_load_args`); a server in another mode relies on
Triton's own graceful shutdown.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pdtrt.engine_io import ModelName, Param, Role
from pdtrt.errors import PdtrtError, ServerError
from pdtrt.repo.pbtxt import parse_config
from pdtrt.serve.model_control import HttpModelControl, ModelControl, ModelState, server_stubs
from pdtrt.serve.procs import children

__all__ = ["FRONT_TIER_S", "drain_stubs", "stop_models", "stop_tiers", "unload_in_order"]

log = logging.getLogger(__name__)

_FRONT_ROLES = (Role.ROUTER, Role.PREPROCESSING, Role.POSTPROCESSING)
_POLL_S = 0.1
_DRAIN_S = 1.0
_UNLOAD_REQUEST_S = 10.0  # one unload request (Triton answers at once; the unload goes on)

FRONT_TIER_S = 20.0
"""The longest wait for the stubs of a tier before the last one: pdtrt's front models finalize
in 1-2 s (a router that flushes its spans: the exporter's 10 s timeout at most); the engines
(the last tier) keep whatever is left of the deadline."""


def stop_models(server_pid: int, *, http_url: str | None, repository: Path,
                deadline: float) -> dict[int, str]:
    """What comes before the SIGTERM to a server: its requests in flight ended
    (:func:`drain_stubs`), then -- with ``http_url``, the server's HTTP ``HOST:PORT`` in
    explicit model-control mode -- its models unloaded by ``deadline`` (:func:`unload_in_order`).
    Returns the stubs that had to be SIGKILLed (pid -> model)."""
    drain_stubs(server_pid)
    if http_url is None:
        return {}
    return unload_in_order(HttpModelControl(http_url, timeout_s=_UNLOAD_REQUEST_S),
                           server_pid=server_pid, repository=repository, deadline=deadline)


def drain_stubs(server_pid: int, *, drain_s: float = _DRAIN_S) -> int:
    """SIGTERM the Python-backend stubs of a server (its child processes) and give them
    ``drain_s`` to end their requests in flight, while the server still runs normally.

    Why first, and apart: once ``tritonserver`` itself has SIGTERM it schedules no further
    ensemble step and refuses new BLS calls, so an ensemble stream in flight then never gets
    its end, and a BLS stream left unfinished keeps its stub from finalizing (measured on 2.51,
    docs/design/serve.md). pdtrt's models end their requests on SIGTERM with an error
    (:mod:`pdtrt.runtime.shutdown`); other Python models' stubs ignore SIGTERM. Returns how
    many stubs were signalled."""
    stubs = children(server_pid)
    for pid in stubs:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if stubs:
        time.sleep(drain_s)
    return len(stubs)


def _kinds(repository: Path) -> dict[str, str]:
    """Model -> ``"ensemble"`` or its ``pdtrt_role`` ("" when neither), from the configs that
    can be read (a repository removed meanwhile gives {})."""
    kinds = {}
    try:
        for config in sorted(repository.glob("*/config.pbtxt")):
            cfg = parse_config(config.read_text())
            role = cfg.parameters[Param.ROLE].string_value if Param.ROLE in cfg.parameters \
                else ""
            kinds[config.parent.name] = "ensemble" if cfg.platform == "ensemble" else role
    except (OSError, PdtrtError) as exc:
        log.info("stopping in order without the roles of %s: %s", repository, exc)
    return kinds


def stop_tiers(models: list[str], repository: Path) -> list[tuple[str, ...]]:
    """``models`` in the order they are unloaded: the front -- the readiness marker, the
    ensembles, the router and the tokenizers -- then the engines (and any model whose kind is
    unknown); empty tiers left out. Two tiers, not one per kind: each tier costs its slowest
    stub's finalize (1-2 s here for a tokenizer, 2-5 s for an engine on 2 busy cores)."""
    kinds = _kinds(repository)
    front = tuple(m for m in models if m == ModelName.HEALTH
                  or kinds.get(m) in ("ensemble", *_FRONT_ROLES))
    engines = tuple(m for m in models if m not in front)
    return [tier for tier in (front, engines) if tier]


def unload_in_order(control: ModelControl, *, server_pid: int, repository: Path,
                    deadline: float, clock: Callable[[], float] = time.monotonic,
                    stubs: Callable[[int], Mapping[int, str]] = server_stubs) -> dict[int, str]:
    """Unload the loaded models of the server ``server_pid`` tier by tier (:func:`stop_tiers`),
    each tier until its stubs have exited or ``deadline`` (``clock`` time) passes -- a tier
    before the last for :data:`FRONT_TIER_S` at most; SIGKILL the stubs still running then.
    Returns those (pid -> model), each logged as a warning. An unload the server refuses is
    logged and not waited for: its stubs are killed at the end."""
    try:
        loaded = [m for m, state in control.states().items()
                  if state in (ModelState.READY, ModelState.LOADING)]
    except ServerError as exc:
        log.warning("cannot unload the models before the stop: %s", exc.message)
        loaded = []
    tiers = stop_tiers(loaded, repository)
    for i, tier in enumerate(tiers):
        due = deadline if i == len(tiers) - 1 else min(deadline, clock() + FRONT_TIER_S)
        unloading = set()
        for model in tier:
            try:
                control.unload(model)
                unloading.add(model)
            except ServerError as exc:
                log.warning("unloading %s: %s", model, exc.message)
        while any(m in unloading for m in stubs(server_pid).values()) and clock() < due:
            time.sleep(_POLL_S)
    left = dict(stubs(server_pid))
    for pid, model in sorted(left.items()):
        log.warning("the stub of %s (pid %d) has not exited after its unload; SIGKILL to it",
                    model, pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
