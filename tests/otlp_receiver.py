"""A real OTLP/HTTP traces receiver for tests: what an OpenTelemetry collector's ``otlp``
receiver does with ``POST /v1/traces`` (binary protobuf, OTLP 1.x), and nothing else.

:class:`OtlpReceiver` listens on a free loopback port in a thread; each request body is decoded
with ``opentelemetry-proto``'s ``ExportTraceServiceRequest`` (the OTLP exporter's own message)
into :class:`ReceivedSpan` s, which :meth:`OtlpReceiver.wait_for` waits for. A gzip body (the
exporter's ``compression`` option) is inflated first.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

# a test module that imports this one is skipped without the tracing extra
_pb = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                          reason="OpenTelemetry is the tracing extra (pip install -e .[tracing])")
pytest.importorskip("opentelemetry.sdk", reason="OpenTelemetry is the tracing extra")
ExportTraceServiceRequest = _pb.ExportTraceServiceRequest
ExportTraceServiceResponse = _pb.ExportTraceServiceResponse

__all__ = ["OtlpReceiver", "ReceivedSpan"]


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


@dataclass(frozen=True)
class ReceivedSpan:
    service: str
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str  # "" for a root
    start_ns: int
    end_ns: int
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0  # 2: ERROR
    status_message: str = ""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


class OtlpReceiver:
    """``with OtlpReceiver() as rx:`` -- ``rx.endpoint`` is the traces URL to export to."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver._take(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="otlp-receiver")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        got = []
        for rs in request.resource_spans:
            attrs = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    got.append(ReceivedSpan(
                        service=str(attrs.get("service.name", "")), name=s.name,
                        trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        start_ns=s.start_time_unix_nano, end_ns=s.end_time_unix_nano,
                        kind=s.kind, attributes={a.key: _value(a.value) for a in s.attributes},
                        status_code=s.status.code, status_message=s.status.message))
        with self._cond:
            self.posts += 1
            self.spans.extend(got)
            self._cond.notify_all()

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool],
                 timeout_s: float = 30.0) -> list[ReceivedSpan]:
        """The spans received once ``done(spans)`` holds; raises TimeoutError naming what
        came when it does not within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not done(list(self.spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("spans received: " + ", ".join(
                        f"{s.service}/{s.name}" for s in self.spans))
                self._cond.wait(left)
            return list(self.spans)
