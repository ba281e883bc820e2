"""What ``pdtrt serve``'s supervisor asks of a running Triton server and of the host.

- :class:`HttpModelControl`: Triton's model-repository extension over HTTP -- the index (each
  model's state), ``load`` and ``unload``. ``load`` of a loaded model reloads it, which is how a
  model whose Python-backend stub died gets a new stub without a server restart (measured on
  Triton 2.51: about 6 s for the reference decode model, requests served again right after).
  The server must run with ``--model-control-mode=explicit`` (:func:`explicit_load_args`).
- :func:`live_stubs`: how many Python-backend stub processes each model of a repository has,
  read from ``/proc`` (a stub's argv names its ``<repository>/<model>/1/model.py``). Triton 2.51
  does not restart a stub that was killed -- an OOM kill, a crash -- and keeps reporting the
  model READY while every request to it fails with "Stub process '<instance>' is not healthy";
  a missing stub is the sign. A killed stub stays a zombie until the model is reloaded; a
  zombie has no command line, so it does not count.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from pdtrt.engine_io import ModelName
from pdtrt.errors import ServerError
from pdtrt.serve.procs import children

__all__ = ["EXPLICIT_MODE", "HttpModelControl", "ModelControl", "ModelState", "explicit_load_args",
           "live_stubs", "model_dirs", "server_stubs"]

STUB_BINARY = "triton_python_backend_stub"
EXPLICIT_MODE = "--model-control-mode=explicit"


class ModelState(StrEnum):
    """States of Triton's repository index (``POST /v2/repository/index``)."""

    READY = "READY"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


class ModelControl(Protocol):
    def states(self) -> dict[str, ModelState]: ...
    def load(self, model: str) -> None: ...
    def unload(self, model: str) -> None: ...


@dataclass(frozen=True)
class HttpModelControl:
    """Triton's model-repository API at ``http_url`` (``HOST:PORT``)."""

    http_url: str
    timeout_s: float = 300.0  # a load waits for the model's initialize (engines: minutes)

    def _post(self, path: str, timeout_s: float) -> bytes:
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=b"{}",
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ServerError(f"{path}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServerError(f"{path}: the server does not answer: {exc}") from None

    def states(self) -> dict[str, ModelState]:
        """Every model of the repository and its state; raises :class:`ServerError`."""
        entries = json.loads(self._post("/v2/repository/index", 10.0) or b"[]")
        return {e["name"]: ModelState(e["state"]) if e.get("state") in tuple(ModelState)
                else ModelState.UNAVAILABLE for e in entries}

    def load(self, model: str) -> None:
        """Load ``model``, or reload it when loaded; raises :class:`ServerError`."""
        self._post(f"/v2/repository/models/{model}/load", self.timeout_s)

    def unload(self, model: str) -> None:
        self._post(f"/v2/repository/models/{model}/unload", 60.0)


def model_dirs(repository: Path) -> list[str]:
    """The models of ``repository``: directories holding a ``config.pbtxt``."""
    return sorted(d.name for d in repository.iterdir()
                  if d.is_dir() and (d / "config.pbtxt").is_file())


def explicit_load_args(repository: Path) -> tuple[str, ...]:
    """Server flags for model control by ``pdtrt serve``: explicit mode, every model loaded at
    start except the readiness marker (``health``), which the supervisor loads once a full
    path is healthy -- so readiness is never claimed before it is true."""
    return (EXPLICIT_MODE,
            *(f"--load-model={m}" for m in model_dirs(repository) if m != ModelName.HEALTH))


def live_stubs(repository: Path, proc: Path = Path("/proc")) -> Counter[str]:
    """Running Python-backend stubs of ``repository``'s models, counted per model."""
    return Counter(model for model, _pid in _stubs(repository, proc))


def kill_stubs(repository: Path, model: str, proc: Path = Path("/proc")) -> int:
    """SIGKILL the running stubs of ``repository``'s ``model``; returns how many."""
    pids = [pid for name, pid in _stubs(repository, proc) if name == model]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # ended meanwhile
            pass
    return len(pids)


def _stub_script(entry: Path) -> str | None:
    """The ``<repository>/<model>/1/model.py`` a running stub process serves (None: not a
    Python-backend stub, or gone meanwhile, or not ours to read)."""
    try:
        argv = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(argv) < 2 or not argv[0].decode(errors="replace").endswith(STUB_BINARY):
        return None
    return argv[1].decode(errors="replace")


def _stubs(repository: Path, proc: Path) -> list[tuple[str, int]]:
    """(model, pid) of each running Python-backend stub of ``repository``'s models."""
    prefix = f"{os.path.abspath(repository)}{os.sep}"
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and (path := _stub_script(entry)) is not None \
                and path.startswith(prefix):
            found.append((path[len(prefix):].split(os.sep, 1)[0], int(entry.name)))
    return found


def server_stubs(server_pid: int, proc: Path = Path("/proc")) -> dict[int, str]:
    """The running Python-backend stubs of the server ``server_pid`` (its children): pid ->
    model. A zombie stub has no command line, so it does not count."""
    found = {}
    for pid in children(server_pid):
        if (path := _stub_script(proc / str(pid))) is not None:
            found[pid] = Path(path).parent.parent.name
    return found
