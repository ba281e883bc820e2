"""Where things are inside a pdtrt pod, and the ports it serves on.

Every pod mounts the same three things: its role's spec (a ConfigMap, read-only, at
``/etc/pdtrt``), the *models volume* (a PersistentVolumeClaim the user fills, read-only, at
``/models``: engines as ``pdtrt build --engines-dir`` lays them out under ``/models/engines``,
and, when the spec names a local checkpoint, its ``config.json`` and tokenizer files under
``/models/checkpoint``), and a writable scratch directory (``/var/run/pdtrt``, an emptyDir)
where the pod generates its Triton repository. Ports are Triton's defaults, fixed, because
Services and the router's endpoints name them; the front pod also serves the OpenAI API on
:data:`OPENAI_PORT` (``pdtrt serve --openai-port``).
"""

from __future__ import annotations

from pathlib import PurePosixPath

__all__ = ["CHECKPOINT_DIR", "ENGINES_DIR", "GRPC_PORT", "HTTP_PORT", "METRICS_PORT",
           "MODELS_DIR", "OPENAI_PORT", "OPENAI_PORT_NAME", "PORTS", "REPO_DIR", "RUN_DIR",
           "SERVE_DIR", "SPEC_DIR", "TMP_DIR"]

SPEC_DIR = PurePosixPath("/etc/pdtrt")
MODELS_DIR = PurePosixPath("/models")
ENGINES_DIR = MODELS_DIR / "engines"
CHECKPOINT_DIR = MODELS_DIR / "checkpoint"
RUN_DIR = PurePosixPath("/var/run/pdtrt")
REPO_DIR = RUN_DIR / "repo"
SERVE_DIR = RUN_DIR / "serve"
TMP_DIR = PurePosixPath("/tmp")

# tritonserver's defaults (--http-port, --grpc-port, --metrics-port)
HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
# container port name -> number; Services, probes and the PodMonitor refer to the names
PORTS = {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT}
# the front pod's OpenAI-compatible front (its /v1 API and its own /metrics)
OPENAI_PORT = 8080
OPENAI_PORT_NAME = "openai"
