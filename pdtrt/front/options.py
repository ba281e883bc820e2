"""What starts an OpenAI front: a plain value, importable without the web stack."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdtrt.tracing_settings import TracingSettings

__all__ = ["FrontOptions"]


@dataclass(frozen=True, kw_only=True)
class FrontOptions:
    repository: Path  # a pdtrt-generated model repository (its pdtrt-repo.json)
    grpc_url: str  # the Triton server serving it, HOST:PORT
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str | None = None
    chat_template: Path | None = None
    stall_s: float = 60.0
    tracing: TracingSettings | None = None  # None: no OpenTelemetry spans
