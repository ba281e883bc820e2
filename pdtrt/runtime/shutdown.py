"""Noticing, inside a model's stub, that its server has been told to stop (SIGTERM).

Why a model must know: on SIGTERM Triton 2.51 stops *enqueueing* new requests to its models
and waits (``--exit-timeout-secs``) for those in flight. An ensemble runs each of its steps as a
new request, so every streaming ``ensemble`` request in flight loses its next postprocessing
step (``PENDING -> FAILED_ENQUEUE`` in the verbose log) and never ends: no more tokens, no
final response, no error. Triton then waits out the exit timeout and hangs in the gRPC
server's shutdown for as long as those clients keep their streams open (minutes, measured).
The only way out is for the models to end the requests themselves: an error response needs
no further ensemble step, so it still reaches the client.

pdtrt signals the whole process group of the server (``TritonServer.stop``, ``pdtrt stop``),
so the stubs get the SIGTERM together with ``tritonserver``. The stub ignores SIGTERM itself
(it waits for the server to finalize it); :class:`ShutdownWatch` installs Python's handler
instead, with a wakeup pipe that a small thread reads, so ``on_stop`` runs at once even though
the stub's main thread sits in C++ most of the time. A SIGTERM sent to ``tritonserver`` alone
does not reach the stubs: stop servers by their process group.

When the server dies instead (SIGKILL, a crash), :class:`ParentWatch` ends the stub.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable

__all__ = ["SETTLE_S", "SHUTTING_DOWN", "ParentWatch", "ShutdownWatch"]

log = logging.getLogger(__name__)

SHUTTING_DOWN = "the server is shutting down"
"""The error every request in flight (and every new one) gets once the server stops."""

SETTLE_S = 0.2
"""How long a draining model holds its requests' last responses before it sends their errors.
Triton 2.51's ensemble stops counting the steps of a request that has failed: an error that
overtakes the postprocessing step of the previous token leaves that ensemble request in
flight for good (its client has the error; the server waits out its exit timeout). Later Triton
releases count them (core's ``EnsembleContext::PrepareSteps``: "Always process completed
steps ... even if the ensemble has already failed")."""


class ShutdownWatch:
    """Runs ``on_stop`` (once, on its own thread) when this process gets SIGTERM."""

    def __init__(self, on_stop: Callable[[], None]) -> None:
        self._on_stop = on_stop
        self._read_fd = -1

    def install(self) -> bool:
        """Take over SIGTERM; False (and a log line) where this thread may not, i.e. it is not
        the process's main thread -- the model then only learns of the stop in finalize()."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            signal.signal(signal.SIGTERM, lambda *_: None)  # Python's C handler wakes the pipe
            signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError as exc:  # not the main thread of the main interpreter
            os.close(read_fd)
            os.close(write_fd)
            log.warning("cannot watch for SIGTERM here (%s); in-flight requests end at "
                        "finalize() instead", exc)
            return False
        self._read_fd = read_fd
        threading.Thread(target=self._wait, name="pdtrt-sigterm", daemon=True).start()
        return True

    def _wait(self) -> None:
        while True:
            try:
                received = os.read(self._read_fd, 64)
            except OSError:
                return
            if not received:
                return
            if signal.SIGTERM in received:
                log.info("SIGTERM: the server is stopping; ending the requests in flight")
                self._on_stop()
                return


PARENT_WATCH_NAME = "pdtrt-parent-watch"  # the watch's $0, in its command line


class ParentWatch:
    """Kills this process (SIGKILL) once the process that started it -- the server, for a
    stub -- has died, i.e. this one was re-parented.

    Triton's stub checks its parent every 300 ms and, when it has died, destroys its Python
    objects and calls ``exit`` (python_backend r24.10 ``src/pb_stub.cc``, the background
    thread of ``main``). That needs the GIL, and a stub whose server died can be stuck with the
    GIL held for good: a ``pb_utils`` call waiting for the dead server's answer (e.g. the
    LLM-API engine model's metric update after a SIGKILL of ``tritonserver``: the stub keeps
    running, re-parented, with its memory and shared-memory region). No Python thread of the
    stub would run again, so the watch is a small process of its own: a shell loop that reads
    the stub's parent from ``/proc`` every ``interval_s`` and kills the stub once it changed;
    it ends by itself when the stub ends.

    The watch ignores SIGTERM, SIGINT and SIGHUP (and so does its ``sleep``: an ignored signal
    stays ignored across ``exec``): it runs in the server's process group, which an orderly
    stop sends SIGTERM first. A watch that died of that SIGTERM left its stub unguarded when
    the stop went no further -- ``pdtrt serve`` SIGKILLed 2 s after its SIGTERM takes
    ``tritonserver`` with it (``PR_SET_PDEATHSIG``), and a stub stuck with the GIL held then ran
    on, re-parented, for good (issue 43: five stubs seen 15 minutes later). Only the SIGKILL
    at the end of a stop ends the watch early, and that one kills its stub too.
    """

    SCRIPT = ("trap '' TERM INT HUP; "
              'while read -r _ _ _ ppid _ < "/proc/$2/stat" && [ "$ppid" = "$1" ]; '
              'do sleep "$3"; done; [ -e "/proc/$2" ] && kill -9 "$2"')

    def __init__(self, *, interval_s: float = 2.0) -> None:
        self.interval_s = interval_s
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Watch this process; its current parent is the one whose death ends it."""
        argv = ["sh", "-c", self.SCRIPT, PARENT_WATCH_NAME, str(os.getppid()),
                str(os.getpid()), f"{self.interval_s:g}"]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
