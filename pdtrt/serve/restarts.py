"""Restarting a Triton server that died under ``pdtrt serve`` (docs/serve.md, "A server that
dies is restarted").

The supervisor heals a dead *model* by reloading it; it cannot heal a dead *server*. Triton
2.51 dies by itself now and then: its Python backend throws
``boost::interprocess::lock_exception`` from a destructor -- ``std::terminate``, SIGABRT --
when a stub died while it held the shared-memory mutex of a decoupled response
(``ModelInstanceState::ResponseSendDecoupled``, python_backend r24.10 ``src/python_be.cc``;
docs/design/serve.md, "owner-dead mutex"). A SIGKILLed stub under load (an OOM kill) can take the
whole server with it that way. Kubernetes restarts the container; ``pdtrt serve`` does the same:
:class:`Restarter` starts the same server again on the same ports, from the same repository,
at most ``max_restarts`` times within ``window_s`` (then it gives up and says so: a server that
keeps dying needs a person). Requests in flight when the server died end with the client's
connection error; readiness is refused while it is down.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdtrt.errors import ServerError
from pdtrt.serve.procs import group_members
from pdtrt.serve.shm import remove_shm_regions
from pdtrt.serve.triton_server import (
    LOCK_EXCEPTION,
    Endpoints,
    ServerConfig,
    TritonServer,
    set_aside,
)

__all__ = ["DEFAULT_MAX_RESTARTS", "RESTART_WINDOW_S", "Restarter", "death_reason"]

log = logging.getLogger(__name__)

DEFAULT_MAX_RESTARTS = 5
RESTART_WINDOW_S = 600.0
_GROUP_GONE_S = 5.0


def death_reason(log_text: str, returncode: int | None = None) -> str:
    """Why the server ended, as far as its exit status and the tail of its log say."""
    if returncode is not None and returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:  # not a signal this Python knows by name
            how = f"killed by signal {-returncode}"
    elif returncode is not None:
        how = f"exited with status {returncode}"
    else:
        how = "gone"
    if LOCK_EXCEPTION in log_text[-20000:]:
        how += (f" ({LOCK_EXCEPTION}: Triton 2.51's owner-dead mutex abort, "
                "docs/design/serve.md)")
    return how


def _end_group(pgid: int) -> None:
    """SIGKILL what is left of a dead server's process group (its stubs, started in the
    server's session) and wait until it is gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + _GROUP_GONE_S
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


@dataclass
class Restarter:
    """Restarts the server of ``config`` on ``endpoints`` when it has died.

    ``on_spawn(pid, shm_prefix)`` is called as soon as a new server process exists (before it
    is ready), so that a detached server's state file names it at once."""

    config: ServerConfig
    endpoints: Endpoints
    max_restarts: int = DEFAULT_MAX_RESTARTS
    window_s: float = RESTART_WINDOW_S
    timeout_s: float = 300.0
    on_spawn: Callable[[int, str], None] = lambda _pid, _prefix: None
    clock: Callable[[], float] = time.monotonic
    restarts: list[float] = dataclasses.field(default_factory=list)

    def allowed(self) -> bool:
        """Whether one more restart stays within ``max_restarts`` per ``window_s``."""
        now = self.clock()
        recent = [t for t in self.restarts if now - t < self.window_s]
        return len(recent) < self.max_restarts

    def restart(self, *, old_pid: int, old_shm_prefix: str,
                returncode: int | None = None) -> TritonServer:
        """Clear what the dead server left (its stubs, its shared memory, its log, moved
        aside) and start it again -- again while a start fails and restarts are left; the
        new, ready server. Raises :class:`ServerError` when no restart is left."""
        reason = death_reason(_read(self.config.log_path), returncode)
        while True:
            if not self.allowed():
                raise ServerError(
                    f"tritonserver (pid {old_pid}) {reason}; not restarted: it died "
                    f"{self.max_restarts} times within {self.window_s:.0f} s",
                    hint=f"see {self.config.log_path} and its .restartN logs")
            self.restarts.append(self.clock())
            _end_group(old_pid)
            remove_shm_regions(old_shm_prefix)
            kept = set_aside(self.config.log_path, "restart")
            log.warning("tritonserver (pid %d) %s; restarting it on the same ports (restart %d "
                        "of at most %d in %.0f s; its log kept as %s)", old_pid, reason,
                        len(self.restarts), self.max_restarts, self.window_s, kept)
            server = TritonServer(dataclasses.replace(
                self.config, host=self.endpoints.host, grpc_port=self.endpoints.grpc_port,
                http_port=self.endpoints.http_port, metrics_port=self.endpoints.metrics_port))
            spawned: list[int] = []

            def spawn(pid: int, server: TritonServer = server,
                      spawned: list[int] = spawned) -> None:
                spawned.append(pid)
                self.on_spawn(pid, server.shm_prefix)

            try:
                server.start(timeout_s=self.timeout_s, on_spawn=spawn)
            except ServerError as exc:  # it died again while starting
                old_pid, old_shm_prefix = (spawned or [old_pid])[-1], server.shm_prefix
                reason = f"did not start again: {exc.message}"
                continue
            log.warning("tritonserver restarted (pid %d)", server.pid)
            return server


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
