"""The CPU reference deployment in the embedded Triton, started fresh for one benchmark."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_reference_server(prefix: str):
    """Build the reference engines and repository (both paths) in a new temp directory and
    start the server on free ports; returns the started ``TritonServer`` (stop it after)."""
    sys.path.insert(0, str(ROOT))
    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer

    work = Path(tempfile.mkdtemp(prefix=prefix))
    prepared = prepare(ROOT / "docs/examples/reference-cpu.yaml", workdir=work,
                       engines_root=work / "engines")
    server = TritonServer(server_config(prepared))
    server.start(timeout_s=600)
    return server
