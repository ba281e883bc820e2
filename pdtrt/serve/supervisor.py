"""``pdtrt serve``'s supervisor: reloads a phase whose process died, and publishes readiness
that tells the truth (docs/serve.md, "Pools, failover, self-healing and readiness").

Triton 2.51 never restarts a Python-backend stub that was killed (an OOM kill, a crash) and
keeps answering 200 on ``/v2/health/ready`` and on the model's own ready endpoint while every
request to that model fails. Once a second the supervisor:

1. finds the models of the repository whose stubs are missing
   (:func:`~pdtrt.serve.model_control.live_stubs`, against each model's instance count);
2. probes every endpoint the deployment's paths need -- the router's pools, read from its
   ``config.pbtxt`` (:class:`~pdtrt.runtime.router.config.RouterConfig`): local models on this
   server and other servers' models, with the router's own probe (a stop request for an unused
   id, :func:`~pdtrt.client.streams.probe`); a repository without a router (``--mode
   pools``, ``aggregated``) needs each of its engine roles;
3. publishes readiness: the ``health`` model is loaded while a full path exists (every pool
   of a path has an endpoint that answers, the router and tokenizer models are alive, and the
   router's event loop answers the same probe -- a wedged loop serves nothing)
   and unloaded while none does, so ``/v2/models/health/ready``
   (:data:`~pdtrt.engine_io.READINESS_PATH`) is the honest readiness -- before the reload;
4. reloads (model-control ``load``) each model whose stub was missing in two rounds running,
   without restarting the server; the router's background probes re-admit its endpoints;
5. kills the stub of a local model that is alive but has not answered its probe (a draining
   model's "draining" is an answer, docs/drain.md) for
   :data:`HUNG_ROUNDS` rounds running, so that step 4 reloads it: such a model never recovers
   by itself. Why: when a router's stub dies, a phase model still streaming to it blocks for
   good on its next response, because Triton 2.51 hands a BLS response to the caller's stub
   and waits, without a timeout, for that stub to take it
   (``ModelInstanceState::SendBLSDecoupledResponse``, python_backend r24.10
   ``src/python_be.cc``); the phase's own stub then waits on that send with pdtrt's seam lock
   held, and every later request and probe of the phase waits behind it.

The server must run in explicit model-control mode
(:func:`~pdtrt.serve.model_control.explicit_load_args`). Only Python-backend models are watched
for dead stubs (a ``tensorrtllm`` model has none); other servers' models are probed, never
reloaded -- their own ``pdtrt serve`` does that.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pdtrt.client.streams import GrpcStreamClient, probe
from pdtrt.endpoints import EndpointSpec
from pdtrt.engine_io import DRAINING, PHASE_ROLES, ModelName, Param, Role
from pdtrt.enums import TritonBackend
from pdtrt.errors import PdtrtError, ServerError
from pdtrt.repo.pbtxt import ModelConfig, parse_config
from pdtrt.runtime.router.config import DEFAULT_PROBE_TIMEOUT_S, RouterConfig
from pdtrt.runtime.router.reload_losses import in_flight, record_lost, reset_lost
from pdtrt.serve.model_control import (
    HttpModelControl,
    ModelControl,
    ModelState,
    kill_stubs,
    live_stubs,
)

__all__ = ["HUNG_ROUNDS", "Health", "Supervisor", "Topology", "read_topology"]

HUNG_ROUNDS = 3  # rounds running without an answer to its probe: a live local model is hung

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
_T = TypeVar("_T")
_ALIVE_ROLES = (Role.ROUTER, Role.PREPROCESSING, Role.POSTPROCESSING)  # no path without them


@dataclass(frozen=True, kw_only=True)
class Topology:
    """What must be alive for a repository to serve, read from its configs."""

    stubs: Mapping[str, int]  # Python-backend models (the marker aside): stubs they run
    pools: Mapping[Role, tuple[EndpointSpec, ...]]  # the endpoints of each pool
    paths: tuple[tuple[Role, ...], ...]  # alternatives: every pool of one must be healthy
    alive: tuple[str, ...]  # local models every path goes through (router, tokenizers)
    error_output: str = ""
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    has_marker: bool = False
    routers: tuple[str, ...] = ()  # router models: a dead one's requests in flight are lost


def _configs(repository: Path) -> dict[str, ModelConfig]:
    return {d.name: parse_config((d / "config.pbtxt").read_text())
            for d in sorted(repository.iterdir()) if (d / "config.pbtxt").is_file()}


def _param(cfg: ModelConfig, key: str) -> str:
    return cfg.parameters[key].string_value if key in cfg.parameters else ""


def read_topology(repository: Path) -> Topology:
    """Raises :class:`PdtrtError` when a config does not parse or the router's endpoints
    do not."""
    configs = _configs(repository)
    stubs = {name: sum(g.count or 1 for g in cfg.instance_group) or 1
             for name, cfg in configs.items()
             if cfg.backend == TritonBackend.PYTHON and name != ModelName.HEALTH}
    roles = {name: _param(cfg, Param.ROLE) for name, cfg in configs.items()}
    alive = tuple(n for n, r in roles.items() if r in _ALIVE_ROLES)
    router = next((cfg for name, cfg in configs.items() if roles[name] == Role.ROUTER), None)
    if router is None:  # each engine role of the repository is a pool of its local models
        pools = {role: tuple(EndpointSpec(model=n) for n, r in roles.items() if r == role)
                 for role in PHASE_ROLES}
        pools = {role: eps for role, eps in pools.items() if eps}
        return Topology(stubs=stubs, pools=pools, paths=(tuple(pools),), alive=alive,
                        has_marker=ModelName.HEALTH in configs)
    routers = tuple(n for n, r in roles.items() if r == Role.ROUTER)
    try:
        rc = RouterConfig.from_params({k: v.string_value for k, v in router.parameters.items()})
    except ValueError as exc:
        raise PdtrtError(f"router/config.pbtxt: {exc}") from None
    main = (Role.PREFILL, Role.DECODE) + ((Role.AGGREGATED,) if rc.aggregated_below else ())
    paths = (main, (Role.AGGREGATED,)) if rc.fallback_to_aggregated else (main,)
    needed = {role for path in paths for role in path}
    return Topology(stubs=stubs, pools={r: rc.pools[r] for r in PHASE_ROLES if r in needed},
                    paths=paths, alive=alive, error_output=rc.error_output,
                    probe_timeout_s=rc.probe_timeout_s,
                    has_marker=ModelName.HEALTH in configs, routers=routers)


@dataclass(frozen=True, kw_only=True)
class Health:
    """One round of the supervisor: what it found and did."""

    ready: bool
    problems: tuple[str, ...] = ()  # why not ready, one line each
    dead: tuple[str, ...] = ()  # models whose stub is missing
    reloaded: tuple[str, ...] = ()
    killed: tuple[str, ...] = ()  # alive but hung: killed, to be reloaded

    def to_dict(self) -> dict[str, object]:
        return {"ready": self.ready, "problems": list(self.problems), "dead": list(self.dead),
                "reloaded": list(self.reloaded), "killed": list(self.killed)}


class Supervisor:
    """Watches the Triton server at ``grpc_url`` / ``control`` that serves ``repository``.

    ``stubs`` counts live stubs per model (:func:`live_stubs` by default), ``probe`` asks one
    endpoint whether it answers (None: yes; the router's probe over gRPC by default),
    ``metrics`` returns the server's Prometheus page (None: not known; then requests lost
    with a router are not counted), ``kill`` kills a model's stubs, and ``topology`` is read
    from the repository unless given: seams for tests.
    """

    def __init__(self, repository: Path, *, grpc_url: str, control: ModelControl,
                 stubs: Callable[[], Mapping[str, int]] | None = None,
                 probe: Callable[[EndpointSpec], Awaitable[str | None]] | None = None,
                 metrics: Callable[[], str] | None = None,
                 kill: Callable[[str], int] | None = None,
                 topology: Topology | None = None) -> None:
        self.repository, self.grpc_url, self.control = repository, grpc_url, control
        self.stubs = stubs or (lambda: live_stubs(repository))
        self.kill = kill or (lambda model: kill_stubs(repository, model))
        self._silent: dict[str, int] = {}  # live local model -> rounds running unanswered
        self.probe = probe or self._grpc_probe
        self.metrics = metrics
        self.topology = topology or read_topology(repository)
        for router in self.topology.routers:  # counted from this supervisor's start
            reset_lost(repository / router)
        self._suspects: set[str] = set()  # models with a missing stub in the last round
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[str, GrpcStreamClient] = {}
        self.last: Health | None = None

    @classmethod
    def for_server(cls, repository: Path, *, grpc_url: str, http_url: str,
                   metrics_url: str | None = None,
                   topology: Topology | None = None) -> Supervisor:
        return cls(repository, grpc_url=grpc_url, control=HttpModelControl(http_url),
                   metrics=None if metrics_url is None else lambda: _fetch(metrics_url),
                   topology=topology)

    # -- one round ---------------------------------------------------------------------------
    def tick(self) -> Health:
        """Look, publish readiness, reload what died; raises :class:`ServerError` when the
        server does not answer."""
        states = self.control.states()
        live = self.stubs()
        dead = tuple(m for m, want in self.topology.stubs.items()
                     if states.get(m) is ModelState.READY and live.get(m, 0) < want)
        problems = [f"{m}: its Python-backend stub is not running" for m in self.topology.alive
                    if m in dead]
        problems += self._path_problems(set(dead))
        problems += self._router_problems(set(dead))
        ready = not problems
        self._publish(ready, states)
        reloaded = self._reload([m for m in dead if m in self._suspects])
        self._suspects = set(dead) - set(reloaded)
        killed = self._kill_hung()
        self.last = Health(ready=ready, problems=tuple(problems), dead=dead, reloaded=reloaded,
                           killed=killed)
        return self.last

    def _kill_hung(self) -> tuple[str, ...]:
        """Kill the stubs of live local models silent for :data:`HUNG_ROUNDS` rounds; the
        next rounds see them dead and reload them."""
        hung = tuple(m for m, rounds in self._silent.items() if rounds >= HUNG_ROUNDS)
        for model in hung:
            log.warning("%s: alive but it has not answered its health probe for %d rounds; "
                        "killing its stub so that it is reloaded", model, self._silent[model])
            self.kill(model)
            self._silent.pop(model)
        return hung

    def _path_problems(self, dead: set[str]) -> list[str]:
        """Why no path can serve ([] when one can)."""
        why = self._loop_run(self._probe_pools(dead))
        healthy = {role for role, reasons in why.items() if reasons is None}
        if any(all(role in healthy for role in path) for path in self.topology.paths):
            return []
        return [f"{role}: no healthy endpoint ({reasons})" for role, reasons in why.items()
                if reasons is not None]

    def _router_problems(self, dead: set[str]) -> list[str]:
        """A router whose stub lives but whose event loop does not answer its probe (a stop
        for an unused id, answered from that loop) serves nothing: not ready; silent for
        :data:`HUNG_ROUNDS` rounds, it is killed and reloaded like any hung model."""
        routers = [EndpointSpec(model=r) for r in self.topology.routers if r not in dead]
        answers = self._loop_run(self._probe_all(routers))
        self._count_silence(dead, zip(routers, answers, strict=True))
        return [f"{e.model}: its event loop does not answer ({problem})"
                for e, problem in zip(routers, answers, strict=True) if problem is not None]

    async def _probe_all(self, endpoints: list[EndpointSpec]) -> list[str | None]:
        return list(await asyncio.gather(*(self.probe(e) for e in endpoints)))

    async def _probe_pools(self, dead: set[str]) -> dict[Role, str | None]:
        """Per pool: None when an endpoint answers, else each endpoint's problem."""
        pools = self.topology.pools
        endpoints = [e for role in pools for e in pools[role]]
        answers = await asyncio.gather(*(self._check(e, dead) for e in endpoints))
        self._count_silence(dead, zip(endpoints, answers, strict=True))
        results = iter(answers)
        out: dict[Role, str | None] = {}
        for role, endpoints in pools.items():
            problems = [(e.label, next(results)) for e in endpoints]
            ok = any(problem is None for _label, problem in problems)
            out[role] = None if ok else "; ".join(f"{label}: {p}" for label, p in problems)
        return out

    def _count_silence(self, dead: set[str],
                       answers: Iterable[tuple[EndpointSpec, str | None]]) -> None:
        """Rounds running in which a live local model answered none of its probes."""
        silent: dict[str, bool] = {}
        for endpoint, problem in answers:
            if endpoint.is_local and endpoint.model in self.topology.stubs:
                # a draining model answers its probe with DRAINING: an answer, not silence
                answered = problem is None or DRAINING in problem
                silent[endpoint.model] = silent.get(endpoint.model, True) and not answered
        for model, quiet in silent.items():
            if quiet and model not in dead:
                self._silent[model] = self._silent.get(model, 0) + 1
            else:
                self._silent.pop(model, None)

    async def _check(self, endpoint: EndpointSpec, dead: set[str]) -> str | None:
        if endpoint.is_local and endpoint.model in dead:
            return "its Python-backend stub is not running"
        return await self.probe(endpoint)

    async def _grpc_probe(self, endpoint: EndpointSpec) -> str | None:
        url = endpoint.url or self.grpc_url
        client = self._clients.setdefault(url, GrpcStreamClient(url))
        # a router has no in-band error output (only the phases do): not asked of it
        router = endpoint.is_local and endpoint.model in self.topology.routers
        return await probe(client, endpoint.model, timeout_s=self.topology.probe_timeout_s,
                           error_output="" if router else self.topology.error_output)

    def _publish(self, ready: bool, states: Mapping[str, ModelState]) -> None:
        if not self.topology.has_marker:
            return
        loaded = states.get(ModelName.HEALTH) is ModelState.READY
        try:
            if ready and not loaded:
                self.control.load(ModelName.HEALTH)
                log.info("ready: every phase has a healthy endpoint")
            elif not ready and loaded:
                self.control.unload(ModelName.HEALTH)
                log.warning("not ready: no full path can serve")
        except ServerError as exc:
            log.warning("cannot publish readiness: %s", exc.message)

    def _reload(self, models: list[str]) -> tuple[str, ...]:
        done = []
        for model in models:
            log.warning("%s: its Python-backend stub died; reloading the model", model)
            if model in self.topology.routers:
                self._count_lost(model)
            start = time.monotonic()
            try:
                self._mark_changed(model)
                self.control.load(model)
            except ServerError as exc:
                log.warning("%s: reload failed: %s", model, exc.message)
                continue
            log.info("%s: reloaded in %.1f s", model, time.monotonic() - start)
            done.append(model)
        return tuple(done)

    def _count_lost(self, router: str) -> None:
        """Note the requests the dead ``router`` had in flight: Triton will never end them,
        and its reload starts from nothing (:mod:`pdtrt.runtime.router.reload_losses`)."""
        if self.metrics is None:
            return
        try:
            lost = in_flight(self.metrics(), router)
        except OSError as exc:
            log.warning("%s: cannot read its metrics to count lost requests: %s", router, exc)
            return
        if lost:
            total = record_lost(self.repository / router, lost)
            log.warning("%s: %d request(s) in flight are lost with it (%d so far)", router,
                        lost, total)

    def _mark_changed(self, model: str) -> None:
        """Make Triton see ``model``'s files as changed, so that ``load`` really reloads it.

        Measured on Triton 2.51: ``load`` of a loaded model whose directory did not change
        since it was loaded does nothing ("loading" / "successfully loaded" in a millisecond,
        the dead stub kept), and a ``config.pbtxt`` that changed only in time is an *update*
        that keeps the instances (docs/user_guide/model_management.md, "Modifying the Model
        Repository": only an instance-config change updates instead of reloading). A dead stub
        changes nothing on disk, so the supervisor touches the files of the model's version
        directories (content untouched): a changed model file is a full reload, new stubs. It
        does so before every reload: that the stub's own ``__pycache__`` may be newer than the
        last load is no change to rely on (docs/design/serve.md, "Triton 2.51 facts").
        """
        now = time.time_ns()
        model_dir = self.repository / model
        touched = 0
        try:
            for version in model_dir.iterdir():
                if version.is_dir() and version.name.isdigit():
                    for path in (version, *version.iterdir()):
                        os.utime(path, ns=(now, now))
                        touched += 1
        except OSError as exc:
            raise ServerError(f"cannot mark {model_dir} as changed for the reload: {exc}",
                              hint="the supervisor needs write access to the repository"
                              ) from None
        if not touched:
            raise ServerError(f"{model_dir} has no version directory to reload from")

    def _loop_run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:  # one loop for the supervisor's life: the gRPC channels live on it
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    # -- over time ---------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float, *, interval_s: float = INTERVAL_S) -> Health:
        """Rounds until the deployment is ready or ``timeout_s`` has passed; the last round
        (not ready: its problems say why). A round the server does not answer counts as not
        ready."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                health = self.tick()
            except ServerError as exc:
                health = Health(ready=False, problems=(exc.message,))
            if health.ready or time.monotonic() >= deadline:
                return health
            time.sleep(interval_s)

    def run(self, stop: threading.Event, *, interval_s: float = INTERVAL_S,
            alive: Callable[[], bool] = lambda: True) -> None:
        """Rounds every ``interval_s`` until ``stop`` is set or ``alive()`` is false."""
        while not stop.is_set() and alive():
            try:
                self.tick()
            except PdtrtError as exc:
                log.warning("supervisor round failed: %s", exc.message)
            except Exception:  # a bug: keep supervising, and keep the traceback
                log.exception("supervisor round failed")
            stop.wait(interval_s)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def _fetch(url: str, timeout_s: float = 2.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode("utf-8", "replace")
