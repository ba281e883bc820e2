"""Where the embedded Triton server is: the ``tritonserver`` binary inside ``nvidia-pytriton``.

The wheel ships Triton 2.51 with the Python backend (``pytriton/tritonserver/``), a
Python-backend stub per Python version and its shared libraries in ``nvidia_pytriton.libs``.
This module only *locates* those parts; it neither imports pytriton nor starts anything.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["EmbeddedTriton", "find_embedded_triton"]


@dataclass(frozen=True, kw_only=True)
class EmbeddedTriton:
    root: Path  # .../site-packages/pytriton/tritonserver

    @property
    def tritonserver(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def python_backend_dir(self) -> Path:
        return self.root / "backends" / "python"

    @property
    def python_stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"

    @property
    def library_dir(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    def missing_parts(self) -> list[str]:
        parts = {
            "tritonserver binary": self.tritonserver,
            "Python backend": self.python_backend_dir / "libtriton_python.so",
            f"Python {sys.version_info.major}.{sys.version_info.minor} backend stub":
                self.python_stub,
            "shared libraries": self.library_dir,
        }
        return [f"{what} ({path})" for what, path in parts.items() if not path.exists()]


def find_embedded_triton() -> EmbeddedTriton | None:
    """The installed embedded server, or None when ``nvidia-pytriton`` is not installed."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return EmbeddedTriton(root=Path(next(iter(spec.submodule_search_locations))) / "tritonserver")
