"""The process table as ``/proc`` tells it: whether a pid runs, a process's children, a
process group's members, when a process started. One reader of ``/proc/PID/stat`` for the
launcher, the server, its restarts and its shared-memory owner records."""

from __future__ import annotations

from pathlib import Path

from pdtrt.runtime.shutdown import PARENT_WATCH_NAME

__all__ = ["children", "group_members", "is_parent_watch", "process_running", "start_ticks"]

_PROC = Path("/proc")
# /proc/PID/stat after the ")" that ends the command name: state, ppid, pgrp, ... starttime
_STATE, _PPID, _PGRP, _START = 0, 1, 2, 19


def _stat(pid: int | str) -> list[str] | None:
    try:
        return (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_running(pid: int) -> bool:
    """Whether ``pid`` still runs: it exists and is not a zombie (an exited process whose
    parent -- gone with ``pdtrt serve --detach`` -- has not reaped it yet)."""
    fields = _stat(pid)
    return fields is not None and fields[_STATE] != "Z"


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat field 22), or None when no
    such process runs: with the pid it names one process, whatever pid reuse happens."""
    fields = _stat(pid)
    return None if fields is None else int(fields[_START])


def _where(field: int, value: int, *, running_only: bool) -> list[int]:
    out = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat(entry.name)) is not None \
                and int(fields[field]) == value \
                and not (running_only and fields[_STATE] == "Z"):
            out.append(int(entry.name))
    return out


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (zombies included)."""
    return _where(_PPID, pid, running_only=False)


def group_members(pgid: int) -> list[int]:
    """The running processes of process group ``pgid``."""
    return _where(_PGRP, pgid, running_only=True)


def is_parent_watch(pid: int) -> bool:
    """Whether ``pid`` is a stub's parent watch (:class:`pdtrt.runtime.shutdown.ParentWatch`)
    or the ``sleep`` of one: it ignores the group's SIGTERM and ends by itself at most its
    interval after its stub."""
    for p in (pid, int(f[_PPID]) if (f := _stat(pid)) is not None else None):
        try:
            if p is not None and PARENT_WATCH_NAME.encode() in \
                    (_PROC / str(p) / "cmdline").read_bytes():
                return True
        except OSError:
            pass
    return False
