"""Running the OpenAI front: on an event loop of its own, in a thread or in the foreground.

:class:`FrontServer` binds ``host:port`` (0: a free port, known once :meth:`start` returns),
serves until :meth:`stop`, then stops taking requests, lets the ones being stopped drain and
closes its gRPC channel. ``pdtrt serve`` runs it in a thread beside the supervisor (and a
detached server's supervisor process does the same); ``pdtrt front`` runs it in the
foreground for a front of its own (the Kubernetes front pod).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

from aiohttp import web

from pdtrt.errors import ServerError
from pdtrt.front.app import FrontConfig, make_app
from pdtrt.front.deployment import ServedDeployment
from pdtrt.front.engine_client import EngineClient
from pdtrt.front.options import FrontOptions
from pdtrt.front.text import FrontTokenizer
from pdtrt.runtime.tracing import Tracing

__all__ = ["FrontOptions", "FrontServer"]

log = logging.getLogger(__name__)


class FrontServer:
    def __init__(self, options: FrontOptions) -> None:
        self.options = options
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.options.host}:{self.port}/v1"

    def _config(self) -> FrontConfig:
        deployment = ServedDeployment.from_repository(self.options.repository)
        tokenizer = FrontTokenizer.load(deployment.tokenizer_dir,
                                        chat_template=self.options.chat_template)
        tracing = self.options.tracing
        return FrontConfig(deployment=deployment, tokenizer=tokenizer,
                           engine=EngineClient(self.options.grpc_url, deployment.engine_model),
                           api_key=self.options.api_key, stall_s=self.options.stall_s,
                           tracing=None if tracing is None else Tracing(tracing, "front"))

    async def _serve(self, on_started: Callable[[], None]) -> None:
        config = self._config()
        runner = web.AppRunner(make_app(config), handler_cancellation=True, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.options.host, self.options.port)
            try:
                await site.start()
            except OSError as exc:
                raise ServerError(f"the OpenAI front cannot listen on {self.options.host}:"
                                  f"{self.options.port}: {exc.strerror}",
                                  hint="pick another --openai-port") from None
            server = site._server  # noqa: SLF001 -- the bound port of port 0
            self.port = server.sockets[0].getsockname()[1] if server else self.options.port
            self._stopped = asyncio.Event()
            on_started()
            log.info("OpenAI front on %s -> %s (%s)", self.url, self.options.grpc_url,
                     config.deployment.engine_model)
            await self._stopped.wait()
        finally:
            await runner.cleanup()
            await config.engine.close()
            if config.tracing is not None:  # the last requests' spans go out
                config.tracing.shutdown()

    def start(self, timeout_s: float = 60.0) -> str:
        """Serve in a thread; returns the base URL (``http://HOST:PORT/v1``). Raises
        :class:`ServerError` when it cannot load or listen."""
        started = threading.Event()
        failed: list[BaseException] = []
        self._loop = asyncio.new_event_loop()

        def main() -> None:
            assert self._loop is not None
            try:
                self._loop.run_until_complete(self._serve(started.set))
            except BaseException as exc:  # said to start()
                failed.append(exc)
                started.set()
            finally:
                self._loop.close()

        self._thread = threading.Thread(target=main, name="pdtrt-openai-front", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise ServerError(f"the OpenAI front did not start within {timeout_s:g} s")
        if failed:
            raise failed[0]
        return self.url

    def stop(self, timeout_s: float = 35.0) -> None:
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopped.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def run(self, on_ready: Callable[[str], None] = lambda _url: None) -> None:
        """Serve in this thread until SIGINT/SIGTERM (``pdtrt front``); ``on_ready`` gets the
        base URL once it listens. Raises :class:`ServerError` when it cannot load or listen."""
        import signal

        def started() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                assert self._stopped is not None
                loop.add_signal_handler(sig, self._stopped.set)
            on_ready(self.url)

        asyncio.run(self._serve(started))
