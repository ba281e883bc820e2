"""Starting and stopping a real ``tritonserver`` process (the embedded one by default).

The embedded server is the Triton 2.51 binary inside ``nvidia-pytriton``
(:mod:`pdtrt.facts.embedded_triton`). To run a repository with Python models it needs a backend
directory ``B/python/`` holding the Python backend library, ``triton_python_backend_utils.py``
and the stub for the running Python; its shared libraries on ``LD_LIBRARY_PATH``; and the
project's environment first on ``PATH`` (the stub's interpreter finds packages through the
first ``python3`` there). An explicit binary (e.g. inside an NGC container) is run as is.

:class:`TritonServer` starts the process in its own session (so the Python-backend stubs go
down with it), waits until the server and every model are ready -- or reports which model
failed and why, from the log -- and stops it in order (:meth:`TritonServer.stop`): SIGTERM to
its stubs (pdtrt's models end their requests in flight on it, :mod:`pdtrt.runtime.shutdown`),
its models unloaded (:mod:`pdtrt.serve.orderly_stop`), SIGTERM to its whole process group,
SIGKILL to what is left after a grace period; it never reaps the server before its stubs are
gone, and removes the shared-memory regions a killed server or stub leaves in ``/dev/shm``.

Nothing is left behind when the starter dies either. The server gets a parent-death signal
(``prctl(PR_SET_PDEATHSIG, SIGKILL)``): it dies with the *thread* that started it -- keep that
thread alive as long as the server (``pdtrt serve`` starts it from its main thread); a detached
server (``die_with_parent=False``) outlives its starter on purpose. Each server's Python backend
gets its own shared-memory prefix, and an owner record next to its regions
(``/dev/shm/<prefix>owner.json``: pid and start time of the server, or of its starter until the
server runs, and the pid namespace) says whose they are; every start removes the regions of
servers that no longer run (:func:`remove_stale_shm_regions`) and never touches a live one's,
nor those it cannot judge (no record, another pid namespace).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pdtrt import envvars
from pdtrt.errors import ServerError
from pdtrt.facts.embedded_triton import EmbeddedTriton, find_embedded_triton
from pdtrt.serve.model_control import EXPLICIT_MODE
from pdtrt.serve.orderly_stop import drain_stubs, stop_models
from pdtrt.serve.procs import group_members, is_parent_watch
from pdtrt.serve.shm import (
    new_shm_prefix,
    record_owners,
    remove_shm_regions,
    remove_stale_shm_regions,
)

log = logging.getLogger(__name__)

__all__ = ["EMPTY_EXIT_S", "LOCK_EXCEPTION", "Endpoints", "ServerConfig", "TritonServer",
           "drain_stubs", "free_port", "prepare_backend_dir", "remove_shm_regions",
           "remove_stale_shm_regions", "set_aside"]

_STUB_TIMEOUT_S = 300
# Triton's own bound on its stop after SIGTERM: waiting for requests in flight, then unloading
# the models (4-8 s for the reference deployment on 2 busy cores, unless stop() has unloaded
# them). pdtrt's models have ended their requests by then (drain_stubs); what can remain is an
# ensemble request Triton 2.51 never completes after a step failed
# (pdtrt.runtime.shutdown.SETTLE_S). Below
# TritonServer.stop's grace: a server that runs out of it still exits before it is killed.
_EXIT_TIMEOUT_S = 10
_START_ATTEMPTS = 3
# The least time a server is given to exit after SIGTERM, whatever is left of the grace: one
# whose models are unloaded has nothing to wait for (it exits in about a second).
EMPTY_EXIT_S = 5.0
LOCK_EXCEPTION = "boost::interprocess::lock_exception"
_LOAD_FAILURE = re.compile(r"failed to load '([^']+)'[^:]*: (.*)$", re.MULTILINE)


# -- dying with the starter ---------------------------------------------------------------------
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when the thread that forked it ends
    (None where ``prctl`` is missing, i.e. not Linux). It runs between fork and exec, so it
    only calls a function resolved beforehand."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None
    parent, kill = os.getpid(), int(signal.SIGKILL)

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, kill)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return hook


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now (the OS picks it); racy by nature, so bind soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    host: str
    grpc_port: int
    http_port: int
    metrics_port: int

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def to_dict(self) -> dict[str, object]:
        return {"grpc": self.grpc_url, "http": self.http_url, "metrics": self.metrics_url}


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    repository: Path
    log_path: Path
    host: str = "127.0.0.1"
    grpc_port: int | None = None  # None: a free port
    http_port: int | None = None
    metrics_port: int | None = None
    tritonserver: Path | None = None  # None: the embedded server
    env: dict[str, str] = field(default_factory=dict)  # added to the server's environment
    backend_dir: Path | None = None  # embedded server: where to assemble the backend dir
    extra_args: tuple[str, ...] = ()
    # SIGKILL the server when the thread that started it ends; False for a detached server
    die_with_parent: bool = True

    @property
    def explicit_model_control(self) -> bool:
        """Whether the server runs in explicit model-control mode (its models can be unloaded
        one by one: :mod:`pdtrt.serve.orderly_stop`)."""
        return EXPLICIT_MODE in self.extra_args

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, for a detached server's state file (what a restart needs)."""
        return {"repository": str(self.repository), "log_path": str(self.log_path),
                "host": self.host, "grpc_port": self.grpc_port, "http_port": self.http_port,
                "metrics_port": self.metrics_port,
                "tritonserver": None if self.tritonserver is None else str(self.tritonserver),
                "env": dict(self.env),
                "backend_dir": None if self.backend_dir is None else str(self.backend_dir),
                "extra_args": list(self.extra_args), "die_with_parent": self.die_with_parent}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> ServerConfig:
        """The inverse of :meth:`to_dict`; raises :class:`ServerError` on anything else."""
        try:
            def path(key: str) -> Path | None:
                value = data.get(key)
                return None if value is None else Path(str(value))

            def port(key: str) -> int | None:
                value = data.get(key)
                return None if value is None else int(str(value))

            env = data.get("env") or {}
            args = data.get("extra_args") or []
            if not isinstance(env, dict) or not isinstance(args, list):
                raise TypeError("env must be a mapping and extra_args a list")
            return cls(repository=Path(str(data["repository"])),
                       log_path=Path(str(data["log_path"])), host=str(data["host"]),
                       grpc_port=port("grpc_port"), http_port=port("http_port"),
                       metrics_port=port("metrics_port"), tritonserver=path("tritonserver"),
                       env={str(k): str(v) for k, v in env.items()},
                       backend_dir=path("backend_dir"), extra_args=tuple(map(str, args)),
                       die_with_parent=bool(data.get("die_with_parent", True)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ServerError(f"not a server configuration pdtrt wrote: {exc}") from None


def set_aside(log_path: Path, label: str) -> Path | None:
    """Move a server's log to ``<log>.<label>N`` (the first N free), so that the next start's
    log does not overwrite it; where it went (None: there was no log)."""
    if not log_path.is_file():
        return None
    n = 1
    while (kept := log_path.with_name(f"{log_path.name}.{label}{n}")).exists():
        n += 1
    log_path.replace(kept)
    return kept


def prepare_backend_dir(embedded: EmbeddedTriton, dest: Path) -> Path:
    """Assemble ``dest/python/`` (symlinks) for the embedded server; returns ``dest``."""
    missing = embedded.missing_parts()
    if missing:
        raise ServerError("the embedded Triton server is incomplete: " + "; ".join(missing),
                          hint="reinstall it: .venv/bin/pip install --force-reinstall "
                          "nvidia-pytriton==0.7.0")
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for src in (embedded.python_backend_dir / "libtriton_python.so",
                embedded.python_backend_dir / "triton_python_backend_utils.py",
                embedded.python_stub):
        link = python_dir / src.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(src)
    return dest


def _exit_status(proc: subprocess.Popen[bytes]) -> int | None:
    """``proc``'s exit status once it has exited (negative: the signal that killed it), None
    while it runs -- without reaping it (``WNOWAIT``): it stays a zombie, which its stubs'
    ``kill(pid, 0)`` still counts as alive (:meth:`TritonServer.stop` says why that matters)."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by someone else already
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether ``proc`` has exited, without reaping it."""
    return _exit_status(proc) is not None


def _wait_exited(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Until ``proc`` exits (not reaped) or ``timeout_s`` passes; whether it exited."""
    deadline = time.monotonic() + timeout_s
    while not _exited(proc):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class TritonServer:
    """One tritonserver process. Use as a context manager, or call start()/stop()."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.shm_prefix = new_shm_prefix()  # this server's Python-backend shm
        self.endpoints: Endpoints | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = None

    # -- lifecycle ---------------------------------------------------------------------------
    def _command_and_env(self) -> tuple[list[str], dict[str, str]]:
        cfg = self.config
        env = dict(os.environ)
        env.update(cfg.env)
        if cfg.tritonserver is not None:
            binary, backend_args = cfg.tritonserver, []
        else:
            embedded = find_embedded_triton()
            if embedded is None:
                raise ServerError("the embedded Triton server is not installed",
                                  hint="install it with ./scripts/test.sh or "
                                  "pip install 'pdtrt[server]', or pass --tritonserver PATH")
            backend_dir = cfg.backend_dir or cfg.log_path.parent / "backends"
            prepare_backend_dir(embedded, backend_dir)
            binary = embedded.tritonserver
            backend_args = [f"--backend-directory={backend_dir}"]
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (str(embedded.library_dir), env.get("LD_LIBRARY_PATH")) if p)
            # The stub's interpreter finds packages through the first python3 on PATH.
            env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
        ep = self.endpoints
        assert ep is not None
        env[envvars.PDTRT_SERVER_GRPC_URL] = ep.grpc_url  # for a router on phase_transport grpc
        cmd = [
            str(binary),
            f"--model-repository={cfg.repository}",
            *backend_args,
            f"--http-address={ep.host}", f"--http-port={ep.http_port}",
            f"--grpc-address={ep.host}", f"--grpc-port={ep.grpc_port}",
            f"--metrics-address={ep.host}", f"--metrics-port={ep.metrics_port}",
            "--log-verbose=0",
            # Python-backend stubs of several servers on one host: their own shared-memory
            # prefix each, and time to start on a loaded machine (the default 30 s ran out
            # while a second server's stubs imported torch on 2 cores, and the server then
            # aborted with boost::interprocess::lock_exception).
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
            f"--backend-config=python,stub-timeout-seconds={_STUB_TIMEOUT_S}",
            f"--exit-timeout-secs={_EXIT_TIMEOUT_S}",
            *cfg.extra_args,
        ]
        return cmd, env

    def start(self, *, timeout_s: float = 120.0,
              on_spawn: Callable[[int], None] | None = None) -> Endpoints:
        """Start the server and wait until it and all its models are ready.

        Raises :class:`ServerError` naming the model that failed to load (from the log), or
        the server's exit, or the timeout. A start that the Python backend aborts with
        ``boost::interprocess::lock_exception`` -- an intermittent Triton 2.51 fault when a
        second server starts on one host -- is retried (``_START_ATTEMPTS`` in all);
        the failed attempt's log is kept next to the log as ``<log>.attemptN``.
        ``on_spawn(pid)`` is called as soon as a server process exists, before it is ready.
        """
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                return self._start_once(timeout_s, on_spawn)
            except ServerError:
                if attempt == _START_ATTEMPTS or LOCK_EXCEPTION not in self.log_text():
                    raise
                set_aside(self.config.log_path, "attempt")
                self.shm_prefix = new_shm_prefix()
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float,
                    on_spawn: Callable[[int], None] | None) -> Endpoints:
        cfg = self.config
        self.endpoints = Endpoints(
            host=cfg.host,
            grpc_port=cfg.grpc_port or free_port(cfg.host),
            http_port=cfg.http_port or free_port(cfg.host),
            metrics_port=cfg.metrics_port or free_port(cfg.host),
        )
        cmd, env = self._command_and_env()
        cfg.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(cfg.log_path, "wb")  # noqa: SIM115 -- closed in stop()
        for prefix in remove_stale_shm_regions():
            log.info("removed the shared memory of a server that no longer runs: %s*", prefix)
        record_owners(self.shm_prefix, [os.getpid()])  # the starter, until the server runs
        try:
            self._proc = subprocess.Popen(
                cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent_hook() if cfg.die_with_parent else None)
        except OSError as exc:
            self.stop()
            raise ServerError(f"cannot run {cmd[0]}: {exc.strerror}",
                              hint="pass --tritonserver with the path of a tritonserver "
                              "binary, or omit it to use the embedded server") from None
        try:
            record_owners(self.shm_prefix, [self._proc.pid])  # from now on: the server
            if on_spawn is not None:
                on_spawn(self._proc.pid)
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _wait_ready(self, timeout_s: float) -> None:
        """Until ``/v2/health/ready`` says 200 *and* the metrics endpoint answers: Triton 2.51
        starts its metrics service after its HTTP one (tens of ms later, seen in a server
        log), so a caller that reads metrics as soon as the server is "ready" could be
        refused."""
        assert self._proc is not None and self.endpoints is not None
        urls = [f"http://{self.endpoints.http_url}/v2/health/ready", self.endpoints.metrics_url]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = _exit_status(self._proc)
            if code is not None:
                raise ServerError(self._failure_text(f"tritonserver exited with status {code}"),
                                  hint=f"see the server log {self.config.log_path}")
            if all(_answers_200(url) for url in urls):
                return
            time.sleep(0.2)
        raise ServerError(self._failure_text(f"tritonserver not ready after {timeout_s:.0f} s"),
                          hint=f"see the server log {self.config.log_path}")

    def log_text(self) -> str:
        try:
            return self.config.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _failure_text(self, what: str) -> str:
        failures = _LOAD_FAILURE.findall(self.log_text())
        if not failures:
            return what
        details = "; ".join(f"model '{name}' failed to load: {why.strip()}"
                            for name, why in failures)
        return f"{what}: {details}"

    def stop(self, *, grace_s: float = 60.0) -> int | None:
        """Stop the server in order; returns its exit status. Within ``grace_s``: end the
        requests in flight (:func:`drain_stubs`), unload the models tier by tier so each
        stub finalizes and exits while the server runs (explicit model-control mode,
        :mod:`pdtrt.serve.orderly_stop`; stubs still running at the deadline are SIGKILLed
        and logged), then SIGTERM the server's process group; SIGKILL (logged) to what has
        not exited by the deadline, the server given :data:`EMPTY_EXIT_S` at least.

        The server is reaped only after its process group got SIGKILL: a Python-backend stub
        whose server has exited *and been reaped* takes python_backend r24.10's non-graceful
        path (``pb_stub.cc``: its health thread sees ``kill(parent, 0)`` fail, unmaps the
        stub's shared memory and calls ``exit(1)`` while its main thread still waits on a
        semaphore inside that memory), which segfaults in ``sem_timedwait`` (libc+0x90bb4, at
        the region's offset 0x220: the kernel's ``segfault at 7f...220 ... error 6``) or in a
        model thread still setting a metric. A zombie still counts as alive to ``kill(pid,
        0)``, so stubs that outlive their server (a crash, Triton's exit timeout ran out) are
        killed while it is a zombie and never see it gone (docs/design/serve.md, "Stubs that
        outlive their server"); :attr:`running` and :attr:`returncode` never reap it either."""
        proc, self._proc = self._proc, None
        code = None
        if proc is not None:
            if not _exited(proc):
                deadline = time.monotonic() + grace_s
                ep = self.endpoints if self.config.explicit_model_control else None
                stop_models(proc.pid, repository=self.config.repository, deadline=deadline,
                            http_url=None if ep is None else ep.http_url)
                self._signal(proc, signal.SIGTERM)
                wait_s = max(deadline - time.monotonic(), EMPTY_EXIT_S)
                if not _wait_exited(proc, wait_s):
                    log.warning("tritonserver (pid %d) has not exited %.1f s after SIGTERM; "
                                "SIGKILL to its process group %s", proc.pid, wait_s,
                                group_members(proc.pid))
                    self._signal(proc, signal.SIGKILL)
            # Stubs still alive (a crashed server's, or one past its exit timeout) are in the
            # same session: end them before the server is reaped.
            left = [pid for pid in group_members(proc.pid)
                    if pid != proc.pid and not is_parent_watch(pid)]
            if left:
                log.warning("tritonserver (pid %d) has exited; SIGKILL to the stubs it left "
                            "running: %s", proc.pid, left)
            self._signal(proc, signal.SIGKILL)
            code = proc.wait()
            remove_shm_regions(self.shm_prefix)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit status of a server that has ended (None while it runs, or never ran). It
        does not reap the server: only :meth:`stop` does, after its stubs are gone."""
        return _exit_status(self._proc) if self._proc is not None else None

    @property
    def running(self) -> bool:
        """Whether the server runs (a server that has exited stays unreaped until
        :meth:`stop`)."""
        return self._proc is not None and not _exited(self._proc)

    def __enter__(self) -> TritonServer:
        if self._proc is None:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
