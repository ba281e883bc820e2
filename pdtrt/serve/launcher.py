"""``pdtrt serve``: from a spec (or a ready repository) to a running Triton server.

Given a spec, :func:`prepare` makes sure the engines exist (the reference target's are built on
the spot when missing; TensorRT-LLM engines must be built on their GPUs first), generates the
model repository into the work directory, and works out the environment of the server: the
UCX settings of the spec's ``kv_transfer`` section (and, for a trtllm-0.21 repository, the
launch environment recorded in its ``pdtrt-repo.json``). Given a repository directory, it
serves it as is. The server runs in explicit model-control mode, so that ``pdtrt serve``'s
supervisor (:mod:`pdtrt.serve.supervisor`) can reload a model whose process died and publish
readiness. A detached server leaves a state file (``serve.json``) in the work directory --
its pid, endpoints, shared-memory prefix and its supervisor's pid (a process of its own,
:mod:`pdtrt.serve.detached`) -- that :func:`stop_detached` reads.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdtrt.blueprint.manifest import MANIFEST_NAME, EngineLayout
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.builder.plan import plan_build
from pdtrt.builder.run import run_build
from pdtrt.enums import Phase
from pdtrt.envvars import PDTRT_API_KEY
from pdtrt.errors import ServerError
from pdtrt.front.options import FrontOptions
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.serve.model_control import explicit_load_args
from pdtrt.serve.orderly_stop import stop_models
from pdtrt.serve.procs import process_running
from pdtrt.serve.restarts import DEFAULT_MAX_RESTARTS
from pdtrt.serve.triton_server import (
    EMPTY_EXIT_S,
    Endpoints,
    ServerConfig,
    remove_shm_regions,
)
from pdtrt.spec.load import load_deployment
from pdtrt.targets.registry import target_support
from pdtrt.tracing_settings import TracingSettings

__all__ = ["Prepared", "kv_environment", "pools_grpc_port", "pools_warnings", "prepare",
           "read_state", "server_config", "spawn_supervisor", "tracing_settings",
           "stop_detached", "update_state", "wait_front", "write_state"]

log = logging.getLogger(__name__)

# A supervisor ends on SIGTERM after its current round (its probes) and its OpenAI front's
# stop: 5 s ran out once with the machine's load average near 30.
_SUPERVISOR_GRACE_S = 15.0

STATE_FILE = "serve.json"
SUPERVISOR_LOG = "supervisor.log"
REPO_MANIFEST = "pdtrt-repo.json"


@dataclass(frozen=True, kw_only=True)
class Prepared:
    repository: Path
    workdir: Path
    spec: DeploymentSpec | None  # None: a repository pdtrt did not generate
    built: tuple[str, ...]  # what had to be built first (reference engines)
    env: dict[str, str]
    mode: RepoMode | None = None  # None: a repository pdtrt did not generate


def kv_environment(spec: DeploymentSpec | None,
                   manifest: dict[str, Any]) -> dict[str, str]:
    """Environment of the server process for the KV transfer (see :mod:`pdtrt.envvars`): the
    spec's UCX settings, plus the launch environment a trtllm repository records in its
    ``pdtrt-repo.json`` (the same values as its ``pdtrt.env``)."""
    env = {"UCX_WARN_UNUSED_ENV_VARS": "n"}
    if spec is not None:
        env["UCX_TLS"] = ",".join(spec.kv_transfer.transports)
        devices = spec.host_net_devices(Phase)  # one server on this host: the pools agree
        if devices:
            env["UCX_NET_DEVICES"] = ",".join(devices)
    env.update({str(k): str(v) for k, v in (manifest.get("launch") or {}).get("env", {}).items()})
    return env


def _read_manifest(repository: Path) -> dict[str, Any]:
    path = repository / REPO_MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def _is_repository(path: Path) -> bool:
    return path.is_dir() and ((path / REPO_MANIFEST).is_file()
                              or any(p.joinpath("config.pbtxt").is_file() for p in path.iterdir()))


def prepare(path: Path, *, workdir: Path, engines_root: Path,
            mode: RepoMode = RepoMode.BOTH,
            progress: Callable[[str], None] = lambda _msg: None) -> Prepared:
    """Resolve ``path`` (spec file or repository dir) into a repository ready to serve."""
    if _is_repository(path):
        manifest = _read_manifest(path)
        spec = DeploymentSpec.model_validate(manifest["spec"]) if "spec" in manifest else None
        mode_text = manifest.get("mode")
        return Prepared(repository=path.resolve(), workdir=workdir, spec=spec, built=(),
                        env=kv_environment(spec, manifest),
                        mode=RepoMode(mode_text) if mode_text in tuple(RepoMode) else None)
    dep = load_deployment(path)
    layout = EngineLayout(engines_root, dep.spec.name)
    missing = [p for p in Phase if not (layout.phase_dir(p) / MANIFEST_NAME).is_file()]
    built: tuple[str, ...] = ()
    if missing:
        if target_support(dep.spec.target).needs_gpu:  # built on their own GPUs, not here
            raise ServerError(
                f"no engines for {', '.join(map(str, missing))} under {layout.deployment_dir}",
                hint=f"build them on their GPUs first: pdtrt build {path} --engines-dir "
                f"{engines_root}")
        progress(f"building the reference engines into {layout.deployment_dir}")
        run_build(plan_build(dep, engines_root=engines_root), dep)
        built = tuple(str(p) for p in missing)
    repository = workdir / "repo"
    progress(f"generating the model repository {repository} ({mode})")
    generate_repo(dep, repository, mode=mode, engines_root=engines_root, force=True)
    return Prepared(repository=repository.resolve(), workdir=workdir, spec=dep.spec,
                    built=built, env=kv_environment(dep.spec, _read_manifest(repository)),
                    mode=mode)


def pools_grpc_port(spec: DeploymentSpec) -> int | None:
    """The gRPC port a ``--mode pools`` server listens on: its pools' endpoint port, when the
    pools' endpoints in other servers agree on one (the front's router dials exactly that)."""
    ports = {int(ep.rsplit(":", 1)[1]) for urls in spec.endpoints.values() for ep in urls}
    return ports.pop() if len(ports) == 1 else None


_LOOPBACK = ("127.", "localhost", "::1", "[::1]")


def pools_warnings(prepared: Prepared, config: ServerConfig) -> list[str]:
    """Why a ``--mode pools`` server may not be where the front's router dials (its pools'
    endpoints): a loopback listen address for a non-loopback endpoint, another gRPC port."""
    spec = prepared.spec
    if prepared.mode is not RepoMode.POOLS or spec is None:
        return []
    out = []
    for endpoint in sorted({ep for urls in spec.endpoints.values() for ep in urls}):
        host, port = endpoint.rsplit(":", 1)
        if not host.startswith(_LOOPBACK) and config.host.startswith(_LOOPBACK):
            out.append(f"the front's router dials {endpoint}, but this server listens on "
                       f"{config.host} only; pass --host 0.0.0.0 (or {host})")
        if config.grpc_port is not None and int(port) != config.grpc_port:
            out.append(f"the front's router dials {endpoint}, but this server's gRPC port is "
                       f"{config.grpc_port}")
    return out


def tracing_settings(prepared: Prepared, endpoint: str | None = None
                     ) -> TracingSettings | None:
    """Where the deployment's traces go: ``endpoint`` (``--otlp-traces-endpoint``) over the
    spec's ``serving.tracing``; None: no tracing. Raises :class:`ServerError` for a malformed
    endpoint."""
    try:
        if prepared.spec is not None:
            return prepared.spec.serving.tracing.settings(endpoint)
        return TracingSettings(endpoint=endpoint) if endpoint else None
    except ValueError as exc:
        raise ServerError(str(exc), hint="pass an OTLP/HTTP traces URL") from None


def server_config(prepared: Prepared, *, host: str | None = None, grpc_port: int | None = None,
                  http_port: int | None = None, metrics_port: int | None = None,
                  tritonserver: Path | None = None,
                  tracing: TracingSettings | None = None) -> ServerConfig:
    """Flags win over the spec's ``serving`` section; unset ports become free ports. A
    ``pools`` repository listens on its pools' endpoint port (what the front's router dials)
    unless ``grpc_port`` is given. ``tracing``: its settings go into the server's environment,
    which every Python-backend stub inherits (:mod:`pdtrt.tracing_settings`)."""
    serving = prepared.spec.serving if prepared.spec is not None else None
    if grpc_port is None and prepared.mode is RepoMode.POOLS and prepared.spec is not None:
        grpc_port = pools_grpc_port(prepared.spec)
    return ServerConfig(
        repository=prepared.repository,
        log_path=prepared.workdir / "server.log",
        host=host or (serving.host if serving else "127.0.0.1"),
        grpc_port=grpc_port or (serving.grpc_port if serving else None),
        http_port=http_port or (serving.http_port if serving else None),
        metrics_port=metrics_port or (serving.metrics_port if serving else None),
        tritonserver=tritonserver,
        env={**prepared.env, **(tracing.to_env() if tracing is not None else {})},
        backend_dir=prepared.workdir / "backends",
        extra_args=explicit_load_args(prepared.repository),
    )


def write_state(workdir: Path, pid: int, endpoints: Endpoints, log_path: Path,
                shm_prefix: str, *, supervisor_pid: int | None = None,
                server: ServerConfig | None = None) -> Path:
    """Write the detached server's state file; ``server`` (its configuration, ports resolved)
    is what the supervisor needs to restart it (:mod:`pdtrt.serve.restarts`)."""
    data: dict[str, Any] = {"pid": pid, "endpoints": endpoints.to_dict(), "log": str(log_path),
                            "shm_prefix": shm_prefix, "supervisor_pid": supervisor_pid}
    if server is not None:
        data["server"] = server.to_dict()
    return _write_json(workdir / STATE_FILE, data)


def update_state(workdir: Path, *, pid: int, shm_prefix: str) -> Path:
    """Name a restarted server in the state file (``pdtrt stop`` then stops that one)."""
    state = read_state(workdir)
    state.update(pid=pid, shm_prefix=shm_prefix)
    return _write_json(workdir / STATE_FILE, state)


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    """Whole or not at all: ``pdtrt stop`` may read it at any moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def spawn_supervisor(workdir: Path, repository: Path, endpoints: Endpoints,
                     server_pid: int, front: FrontOptions | None = None, *,
                     max_restarts: int = DEFAULT_MAX_RESTARTS) -> int:
    """Start the detached server's supervisor (:mod:`pdtrt.serve.detached`) in a session of
    its own, logging to ``WORKDIR/supervisor.log``; returns its pid. When the server dies it
    restarts it (``max_restarts``, :mod:`pdtrt.serve.restarts`, from the state file's
    ``server``), else it ends. With ``front`` it also serves the OpenAI front (its API key goes
    through the environment, not the command line)."""
    args = [sys.executable, "-m", "pdtrt.serve.detached", "--repository", str(repository),
            "--grpc", endpoints.grpc_url, "--http", endpoints.http_url,
            "--metrics", endpoints.metrics_url, "--server-pid", str(server_pid),
            "--workdir", str(workdir), "--max-restarts", str(max_restarts)]
    env = dict(os.environ)
    env.pop(PDTRT_API_KEY, None)
    if front is not None:
        args += ["--openai-host", front.host, "--openai-port", str(front.port),
                 "--stall-timeout", str(front.stall_s)]
        if front.chat_template is not None:
            args += ["--chat-template", str(front.chat_template.resolve())]
        if front.api_key is not None:
            env[PDTRT_API_KEY] = front.api_key
        if front.tracing is not None:  # read back by the detached front (from_env)
            env.update(front.tracing.to_env())
    with open(workdir / SUPERVISOR_LOG, "ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    return proc.pid


def wait_front(front: FrontOptions, workdir: Path, supervisor_pid: int,
               timeout_s: float = 60.0) -> str:
    """Wait until the detached supervisor's OpenAI front answers ``/health``; its base URL.
    Raises :class:`ServerError` (naming the supervisor's log) when it does not."""
    base = f"http://{front.host}:{front.port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2):
                return base + "/v1"
        except OSError:
            pass
        if not Path(f"/proc/{supervisor_pid}").exists():
            break
        time.sleep(0.2)
    raise ServerError(f"the OpenAI front on {front.host}:{front.port} did not come up",
                      hint=f"see {workdir / SUPERVISOR_LOG}; the server runs on (stop it with "
                      f"`pdtrt stop {workdir}`)")


def read_state(workdir: Path) -> dict[str, object]:
    state = workdir / STATE_FILE
    try:
        data = json.loads(state.read_text())
    except FileNotFoundError:
        raise ServerError(f"no detached server recorded in {workdir} (no {STATE_FILE})",
                          hint="start one with: pdtrt serve SPEC --detach --workdir DIR") from None
    except ValueError:  # not JSON: said below
        data = None
    if not isinstance(data, dict) or not str(data.get("pid", "")).isdigit():
        raise ServerError(f"{state} is not the state pdtrt serve --detach wrote (no server "
                          "pid in it); was it overwritten?",
                          hint="find the server with `pgrep -af tritonserver` and stop it by "
                          "its pid (SIGTERM to its process group)")
    return data


def stop_detached(workdir: Path, *, grace_s: float = 60.0) -> int:
    """SIGTERM the detached server's supervisor, then stop the server the state file names
    once the supervisor has ended (it may have restarted the server) in order, within
    ``grace_s``: its requests in flight ended, its models unloaded so that its stubs exit
    while it runs (:func:`~pdtrt.serve.orderly_stop.stop_models`), SIGTERM to its process
    group, SIGKILL (logged) to what still runs then; returns the server's pid.

    Why the order matters here most: the server is not this process's child but init's, which
    reaps it the moment it exits -- and a stub that outlives its reaped server segfaults
    (docs/design/serve.md, "Stubs that outlive their server")."""
    state = read_state(workdir)
    if state.get("supervisor_pid"):  # first, so it does not reload what is being stopped
        _end(int(str(state["supervisor_pid"])), os.kill, grace_s=_SUPERVISOR_GRACE_S)
        state = read_state(workdir)  # the server it may have restarted meanwhile
    pid = int(str(state["pid"]))
    deadline = time.monotonic() + grace_s
    if process_running(pid):
        http_url, repository = _unload_target(state)
        stop_models(pid, http_url=http_url, repository=repository, deadline=deadline)
    # the server's group: what is left of its stubs too
    _end(pid, os.killpg, grace_s=max(deadline - time.monotonic(), EMPTY_EXIT_S))
    try:  # what a killed server or stub leaves in /dev/shm
        remove_shm_regions(str(state.get("shm_prefix", "")))
    except ValueError:  # a state file from an older pdtrt, or edited by hand
        pass
    (workdir / STATE_FILE).unlink(missing_ok=True)
    return pid


def _unload_target(state: dict[str, object]) -> tuple[str | None, Path]:
    """The detached server's HTTP ``HOST:PORT`` -- None unless it runs in explicit
    model-control mode (its models can be unloaded; not known from an older pdtrt's state
    file) -- and its repository."""
    raw, endpoints = state.get("server"), state.get("endpoints")
    try:
        config = ServerConfig.from_dict(raw if isinstance(raw, dict) else {})
    except ServerError:
        return None, Path()
    http = endpoints.get("http") if isinstance(endpoints, dict) else None
    explicit = config.explicit_model_control and http
    return (str(http) if explicit else None), config.repository


def _end(pid: int, send: Callable[[int, int], None], *, grace_s: float) -> None:
    """``send`` (``os.kill``, or ``os.killpg`` for a process group) SIGTERM to ``pid``, then
    SIGKILL (logged) when it still runs after ``grace_s``."""
    try:
        send(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and process_running(pid):
            time.sleep(0.1)
        if process_running(pid):
            log.warning("pid %d still runs %.1f s after SIGTERM; SIGKILL to it", pid, grace_s)
        send(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
