"""The Python backend's shared memory of each Triton server pdtrt starts, in ``/dev/shm``.

Each server gets its own region prefix (``--backend-config=python,shm-region-prefix-name``,
``pdtrt_<12 hex>_``), and Triton names every region of that server ``<prefix><uuid>``; 1 MiB or
more each. Triton removes them when it exits cleanly; a killed server or stub leaves them for
good. Whose they are is written next to them, in an owner record ``<prefix>owner.json``: the pid
and start time of each process whose life keeps them (the starter while the server starts,
then the server), and the pid namespace those pids belong to. :func:`remove_stale_shm_regions`
(run at every start) removes the regions whose owners have all ended -- never those of a live
server, nor those it cannot judge (no record: another pdtrt version, or not pdtrt's; a record
from another pid namespace, e.g. a container sharing ``/dev/shm``). Other sessions and users
share this directory: only pdtrt's own prefixes are ever touched.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path

from pdtrt.serve.procs import start_ticks

__all__ = ["SHM_DIR", "new_shm_prefix", "record_owners", "remove_shm_regions",
           "remove_stale_shm_regions"]

SHM_DIR = Path("/dev/shm")
_SHM_PREFIX = re.compile(r"pdtrt_[0-9a-f]{12}_")


def new_shm_prefix() -> str:
    """A fresh per-server Python-backend shm prefix (matches ``_SHM_PREFIX``)."""
    return f"pdtrt_{secrets.token_hex(6)}_"


def remove_shm_regions(prefix: str, shm_dir: Path = SHM_DIR) -> int:
    """Delete the Python backend's shared-memory regions of one server (``prefix*``, its owner
    record included).

    Triton removes them on a clean exit; a killed server or stub leaves them (1 MiB or more
    each). Only pdtrt's own per-server prefixes are accepted. Returns how many were removed.
    """
    if not _SHM_PREFIX.fullmatch(prefix):
        raise ValueError(f"not a pdtrt shared-memory prefix: {prefix!r}")
    removed = 0
    for region in shm_dir.glob(f"{prefix}*"):
        try:
            region.unlink()
            removed += 1
        except OSError:  # gone already, or not ours to remove
            pass
    return removed


# -- whose regions: the owner record ------------------------------------------------------------
_OWNER = "owner.json"  # /dev/shm/<prefix>owner.json


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def record_owners(prefix: str, pids: list[int], shm_dir: Path = SHM_DIR) -> None:
    """Record the processes whose life keeps ``prefix``'s regions (written atomically; the
    temporary name matches no prefix). Nothing to record where there is no ``shm_dir``."""
    if not shm_dir.is_dir():
        return
    owners = [{"pid": pid, "start": start_ticks(pid)} for pid in pids]
    record = {"owners": owners, "pid_namespace": _pid_namespace()}
    tmp = shm_dir / f".{prefix}{_OWNER}.{os.getpid()}"
    tmp.write_text(json.dumps(record))
    os.replace(tmp, shm_dir / f"{prefix}{_OWNER}")


def _owner_alive(record: dict[str, object]) -> bool | None:
    """True when a recorded owner still runs, False when none does, None: cannot judge."""
    if record.get("pid_namespace") != _pid_namespace():
        return None  # pids of another namespace mean nothing here
    owners = record.get("owners")
    if not isinstance(owners, list) or not owners:
        return None
    return any(start_ticks(int(o["pid"])) == o["start"] for o in owners)


def remove_stale_shm_regions(shm_dir: Path = SHM_DIR) -> list[str]:
    """Remove the regions of pdtrt servers that no longer run: each prefix whose owner record
    names only processes that have ended. Regions of a live server, and those without a
    readable record (another pdtrt version, another pid namespace), are kept. Returns the
    prefixes cleaned."""
    cleaned = []
    for path in sorted(shm_dir.glob(f"pdtrt_*_{_OWNER}")):
        prefix = path.name[:-len(_OWNER)]
        if not _SHM_PREFIX.fullmatch(prefix):
            continue
        try:
            record = json.loads(path.read_text())
            alive = _owner_alive(record) if isinstance(record, dict) else None
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alive is False:
            remove_shm_regions(prefix, shm_dir)
            cleaned.append(prefix)
    return cleaned


