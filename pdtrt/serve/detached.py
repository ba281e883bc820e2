"""The supervisor of a detached server, as a process of its own.

``pdtrt serve --detach`` returns once the server is ready; its supervision
(:mod:`pdtrt.serve.supervisor`) goes on here: ``python -m pdtrt.serve.detached --repository R
--grpc HOST:PORT --http HOST:PORT --server-pid PID``, started by
:func:`pdtrt.serve.launcher.spawn_supervisor`, its pid recorded in the work directory's
``serve.json``. It logs to ``WORKDIR/supervisor.log`` (its stderr), ends on SIGTERM (``pdtrt
stop`` sends it first) and by itself once the server process has gone. With ``--openai-port``
it also serves the OpenAI front (:mod:`pdtrt.front`), its API key from ``PDTRT_API_KEY``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path

from pdtrt.envvars import PDTRT_API_KEY
from pdtrt.front.options import FrontOptions
from pdtrt.front.server import FrontServer
from pdtrt.serve.supervisor import Supervisor

__all__ = ["main"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now: ours has gone
        return False
    return True


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
            chat_template=args.chat_template, stall_s=args.stall_timeout))
        front.start()
    try:
        supervisor.run(stop, alive=lambda: _alive(args.server_pid))
    finally:
        if front is not None:
            front.stop()
        supervisor.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
