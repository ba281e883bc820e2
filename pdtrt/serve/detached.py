"""The supervisor of a detached server, as a process of its own.

``pdtrt serve --detach`` returns once the server is ready; its supervision
(:mod:`pdtrt.serve.supervisor`) goes on here: ``python -m pdtrt.serve.detached --repository R
--grpc HOST:PORT --http HOST:PORT --server-pid PID``, started by
:func:`pdtrt.serve.launcher.spawn_supervisor`, its pid recorded in the work directory's
``serve.json``. It logs to ``WORKDIR/supervisor.log`` (its stderr), ends on SIGTERM (``pdtrt
stop`` sends it first). When the server process dies it starts it again on the same ports
(:mod:`pdtrt.serve.restarts`; its configuration from ``serve.json``, which then names the new
server), at most ``--max-restarts`` times in ten minutes; past that, or with
``--max-restarts 0``, it ends with the server (exit status 1). With ``--openai-port`` it also
serves the OpenAI front (:mod:`pdtrt.front`), its API key from ``PDTRT_API_KEY``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from pdtrt.envvars import PDTRT_API_KEY
from pdtrt.errors import PdtrtError, ServerError
from pdtrt.front.options import FrontOptions
from pdtrt.front.server import FrontServer
from pdtrt.serve.launcher import STATE_FILE, read_state, update_state
from pdtrt.serve.procs import process_running
from pdtrt.serve.restarts import Restarter
from pdtrt.serve.supervisor import Supervisor
from pdtrt.serve.triton_server import Endpoints, ServerConfig, TritonServer
from pdtrt.tracing_settings import TracingSettings

__all__ = ["main"]

log = logging.getLogger("pdtrt.serve.detached")


class _Watched:
    """The server being supervised: the one ``pdtrt serve`` started (not this process's
    child), then the ones this process restarted (its children)."""

    def __init__(self, pid: int, shm_prefix: str) -> None:
        self.pid, self.shm_prefix = pid, shm_prefix
        self.server: TritonServer | None = None

    def alive(self) -> bool:
        if self.server is not None:
            return self.server.running
        return process_running(self.pid)

    def returncode(self) -> int | None:
        return self.server.returncode if self.server is not None else None


def _restarter(workdir: Path, max_restarts: int) -> tuple[Restarter, _Watched]:
    state = read_state(workdir)
    raw = state.get("server")
    if not isinstance(raw, dict):
        raise ServerError(f"{workdir / STATE_FILE} has no server configuration to restart "
                          "from (written by an older pdtrt?)")
    config = ServerConfig.from_dict(raw)
    endpoints = Endpoints(host=config.host, grpc_port=int(config.grpc_port or 0),
                          http_port=int(config.http_port or 0),
                          metrics_port=int(config.metrics_port or 0))
    restarter = Restarter(config=config, endpoints=endpoints, max_restarts=max_restarts,
                          on_spawn=lambda pid, prefix: update_state(workdir, pid=pid,
                                                                    shm_prefix=prefix))
    return restarter, _Watched(int(str(state["pid"])), str(state.get("shm_prefix", "")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdtrt.serve.detached",
                                     description="Supervise a detached pdtrt server.")
    parser.add_argument("--repository", type=Path, required=True)
    parser.add_argument("--grpc", required=True, help="the server's gRPC HOST:PORT")
    parser.add_argument("--http", required=True, help="the server's HTTP HOST:PORT")
    parser.add_argument("--metrics", help="the server's Prometheus metrics URL")
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--openai-host", default="127.0.0.1")
    parser.add_argument("--openai-port", type=int, help="serve the OpenAI front on this port")
    parser.add_argument("--chat-template", type=Path)
    parser.add_argument("--stall-timeout", type=float, default=60.0)
    parser.add_argument("--workdir", type=Path, help="the work directory (its serve.json)")
    parser.add_argument("--max-restarts", type=int, default=0,
                        help="restarts of a dead server within ten minutes (needs --workdir)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s pdtrt supervisor: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    supervisor = Supervisor.for_server(args.repository, grpc_url=args.grpc, http_url=args.http,
                                       metrics_url=args.metrics)
    front = None
    if args.openai_port is not None:
        front = FrontServer(FrontOptions(
            repository=args.repository, grpc_url=args.grpc, host=args.openai_host,
            port=args.openai_port, api_key=os.environ.get(PDTRT_API_KEY) or None,
            chat_template=args.chat_template, stall_s=args.stall_timeout,
            tracing=TracingSettings.from_env()))
        front.start()
    watched = _Watched(args.server_pid, "")
    restarter: Restarter | None = None
    try:
        supervisor.run(stop, alive=watched.alive)
        while not stop.is_set() and args.max_restarts > 0 and args.workdir is not None:
            try:
                if restarter is None:
                    restarter, watched = _restarter(args.workdir, args.max_restarts)
                code = watched.returncode()
                if watched.server is not None:  # a child: reaped only after its stubs died
                    watched.server.stop()
                watched.server = restarter.restart(old_pid=watched.pid,
                                                   old_shm_prefix=watched.shm_prefix,
                                                   returncode=code)
            except PdtrtError as exc:
                log.error("%s%s", exc.message, f" ({exc.hint})" if exc.hint else "")
                return 1
            watched.pid, watched.shm_prefix = watched.server.pid or 0, watched.server.shm_prefix
            supervisor.run(stop, alive=watched.alive)
        if not stop.is_set():
            log.error("the server (pid %d) has gone; supervision ends", watched.pid)
            return 1
    finally:
        if front is not None:
            front.stop()
        supervisor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
