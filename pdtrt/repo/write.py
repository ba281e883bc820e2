"""Writing a whole directory tree atomically: readers see the old tree or the new one.

The files go to a temporary directory next to the target (same filesystem), which then takes
the target's name with ``os.replace``. An existing target is refused unless ``force`` (then it
is moved aside first and deleted after the swap); an existing *empty* directory is replaced.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pdtrt.errors import RepoError

__all__ = ["check_writable", "write_tree"]


def check_writable(out: Path, *, force: bool) -> None:
    """Raise :class:`RepoError` when writing ``out`` would clobber something."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir() or out.is_symlink():
        raise RepoError(f"{out} exists and is not a directory", hint="choose another -o DIR")
    if any(out.iterdir()) and not force:
        raise RepoError(f"{out} already exists and is not empty",
                        hint="pass --force to replace it, or choose another -o DIR")


def write_tree(out: Path, files: dict[str, str], *, dirs: tuple[str, ...] = (),
               executables: tuple[str, ...] = (), force: bool = False) -> None:
    """Write ``files`` (relative path -> text) and empty ``dirs`` as the directory ``out``."""
    check_writable(out, force=force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        for rel in dirs:
            (tmp / rel).mkdir(parents=True, exist_ok=True)
        for rel, text in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            os.chmod(path, 0o755 if rel in executables else 0o644)
        os.chmod(tmp, 0o755)
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old / "tree")
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
