"""Where traces go (pdtrt.tracing_settings): the environment every traced process reads, the
spec's serving.tracing, and their refusals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from pdtrt.blueprint.spec import TracingSection
from pdtrt.tracing_settings import TracingSettings, stub_settings

URL = "http://collector:4318/v1/traces"


def test_the_settings_cross_processes_as_the_standard_environment():
    settings = TracingSettings(endpoint=URL, sample_ratio=0.25, service_prefix="shop")
    env = settings.to_env()
    assert env == {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": URL,
                   "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                   "OTEL_TRACES_SAMPLER_ARG": "0.25", "PDTRT_TRACING_SERVICE_PREFIX": "shop"}
    assert TracingSettings.from_env(env) == settings
    assert settings.service("decode") == "shop-decode"


def test_no_endpoint_is_no_tracing_and_defaults_fill_the_rest():
    assert TracingSettings.from_env({}) is None
    assert TracingSettings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " "}) is None
    assert TracingSettings.from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": URL}) == \
        TracingSettings(endpoint=URL, sample_ratio=1.0, service_prefix="pdtrt")


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"endpoint": "collector:4318"}, "is not an http(s):// URL"),
    ({"endpoint": "grpc://collector:4317"}, "is not an http(s):// URL"),
    ({"endpoint": URL, "sample_ratio": 1.5}, "not in [0, 1]"),
], ids=["no-scheme", "grpc-scheme", "ratio"])
def test_malformed_settings_are_refused(kwargs, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        TracingSettings(**kwargs)


def test_a_stub_with_malformed_settings_loads_untraced(monkeypatch, caplog):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318")
    assert stub_settings() is None
    assert "tracing off" in caplog.text
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", URL)
    assert stub_settings() == TracingSettings(endpoint=URL)


def test_the_spec_section_is_off_by_default_and_a_flag_overrides_its_endpoint():
    assert TracingSection().settings() is None
    section = TracingSection(endpoint=URL, sample_ratio=0.5, service_prefix="p")
    assert section.settings() == TracingSettings(endpoint=URL, sample_ratio=0.5,
                                                 service_prefix="p")
    other = "https://elsewhere/v1/traces"
    assert section.settings(other).endpoint == other
    assert TracingSection().settings(other) == TracingSettings(endpoint=other)


@pytest.mark.parametrize(("field", "value"), [
    ("endpoint", "localhost:4318"), ("sample_ratio", -0.1), ("service_prefix", "a b"),
    ("sampler", "always"),
], ids=["endpoint", "ratio", "prefix", "unknown-key"])
def test_the_spec_section_is_validated_at_the_edge(field, value):
    with pytest.raises(ValidationError):
        TracingSection(**{field: value})
