"""Where a deployment's OpenTelemetry traces go: the collector, the sampling, the service names.

Tracing is off unless an OTLP/HTTP traces endpoint is named -- by the spec's
``serving.tracing.endpoint``, ``pdtrt serve`` / ``pdtrt front`` ``--otlp-traces-endpoint``,
or the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` in a process's environment. Every
process that traces (the OpenAI front, and inside Triton the router and engine stubs) reads
the same :class:`TracingSettings`, which crosses process boundaries as environment variables
(:meth:`TracingSettings.to_env` / :meth:`TracingSettings.from_env`): ``pdtrt serve`` writes
them into the Triton server's environment, which every Python-backend stub inherits, and
``pdtrt deploy k8s`` into the pods' manifests. The names are OpenTelemetry's own where one
exists (the OpenTelemetry specification, "Environment Variable Specification":
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is the traces URL used as is, ``/v1/traces``
included; ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG``), and pdtrt's for the prefix
of the service names (``<prefix>-front``, ``<prefix>-router``, ``<prefix>-<engine model>``).

This module is vocabulary: plain values, no OpenTelemetry import (that is
:mod:`pdtrt.runtime.tracing`'s, and only when an endpoint is set).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pdtrt.envvars import (
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG,
    PDTRT_TRACING_SERVICE_PREFIX,
)

__all__ = ["DEFAULT_SERVICE_PREFIX", "SAMPLER", "TracingSettings", "check_endpoint",
           "stub_settings"]

log = logging.getLogger(__name__)

DEFAULT_SERVICE_PREFIX = "pdtrt"
# A request whose caller sent a sampled traceparent is always traced; one without is traced
# with the ratio (the SDK's ParentBased(TraceIdRatioBased(ratio)); OTEL_TRACES_SAMPLER's name)
SAMPLER = "parentbased_traceidratio"


def check_endpoint(url: str) -> str:
    """``url`` if it is an ``http(s)://host[:port]/path`` URL; raises ValueError saying why
    not (the spec and the CLI turn it into their own error)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"OTLP traces endpoint {url!r} is not an http(s):// URL "
                         "(e.g. http://otel-collector:4318/v1/traces)")
    return url


@dataclass(frozen=True, kw_only=True)
class TracingSettings:
    """Where spans go (``endpoint``: the OTLP/HTTP traces URL), the share of requests without
    a caller's sampling decision that are traced, and the service names' prefix."""

    endpoint: str
    sample_ratio: float = 1.0
    service_prefix: str = DEFAULT_SERVICE_PREFIX

    def __post_init__(self) -> None:
        check_endpoint(self.endpoint)
        if not (0.0 <= self.sample_ratio <= 1.0) or math.isnan(self.sample_ratio):
            raise ValueError(f"tracing sample ratio {self.sample_ratio} is not in [0, 1]")

    def service(self, role: str) -> str:
        """The ``service.name`` of one traced process (``role``: front, router, a model)."""
        return f"{self.service_prefix}-{role}"

    def to_env(self) -> dict[str, str]:
        return {OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: self.endpoint,
                OTEL_TRACES_SAMPLER: SAMPLER,
                OTEL_TRACES_SAMPLER_ARG: repr(self.sample_ratio),
                PDTRT_TRACING_SERVICE_PREFIX: self.service_prefix}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TracingSettings | None:
        """The settings in ``environ`` (default: this process's), or None when no traces
        endpoint is set (tracing off). A malformed value raises ValueError."""
        env = os.environ if environ is None else environ
        endpoint = env.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "").strip()
        if not endpoint:
            return None
        ratio = env.get(OTEL_TRACES_SAMPLER_ARG, "").strip()
        return cls(endpoint=endpoint, sample_ratio=float(ratio) if ratio else 1.0,
                   service_prefix=env.get(PDTRT_TRACING_SERVICE_PREFIX, "").strip()
                   or DEFAULT_SERVICE_PREFIX)


def stub_settings() -> TracingSettings | None:
    """A Triton stub's settings, from its environment: None when tracing is off, and when they
    are malformed (logged: a stub must load anyway). A stub that gets None imports nothing
    of OpenTelemetry or of pdtrt's tracing modules."""
    try:
        return TracingSettings.from_env()
    except ValueError as exc:
        log.error("tracing off: %s", exc)
        return None
