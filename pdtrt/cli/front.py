"""``pdtrt front``: the OpenAI-compatible HTTP front of a running deployment, on its own."""

from __future__ import annotations

from pathlib import Path

import click

from pdtrt.cli.render import emit_json, json_option
from pdtrt.envvars import OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, PDTRT_API_KEY
from pdtrt.front.options import FrontOptions
from pdtrt.tracing_settings import TracingSettings, check_endpoint


def _endpoint(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if not value:
        return None
    try:
        return check_endpoint(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def front_options(f):
    """``--api-key``, ``--chat-template``, ``--stall-timeout`` and ``--otlp-traces-endpoint``,
    shared with ``pdtrt serve``."""
    f = click.option("--otlp-traces-endpoint", "otlp_endpoint", metavar="URL",
                     envvar=OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, show_envvar=True,
                     callback=_endpoint,
                     help="Export OpenTelemetry traces over OTLP/HTTP to URL (e.g. "
                     "http://otel-collector:4318/v1/traces; docs/tracing.md) [default: "
                     "serve: the spec's serving.tracing.endpoint; else none].")(f)
    f = click.option("--stall-timeout", "stall_s", type=click.FloatRange(min=1),
                     default=60.0, show_default=True,
                     help="OpenAI front: a request whose deployment sends nothing for this "
                     "many seconds fails with 504 and is stopped.")(f)
    f = click.option("--chat-template", type=click.Path(exists=True, dir_okay=False,
                                                        path_type=Path),
                     help="OpenAI front: a Jinja chat template file, for a tokenizer that "
                     "has none (or to replace its own).")(f)
    return click.option("--api-key", envvar=PDTRT_API_KEY, show_envvar=True,
                        help="OpenAI front: requests to /v1 need 'Authorization: Bearer "
                        "KEY' (401 without) [default: no key].")(f)


@click.command("front")
@click.argument("repository", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--grpc-url", required=True, metavar="HOST:PORT",
              help="gRPC address of the Triton server that serves REPOSITORY.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Listen address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="Listen port (0: a free one).")
@front_options
@json_option
def front(repository: Path, grpc_url: str, host: str, port: int, api_key: str | None,
          chat_template: Path | None, stall_s: float, otlp_endpoint: str | None,
          as_json: bool) -> None:
    """Serve the OpenAI API (/v1/models, /v1/completions, /v1/chat/completions, streamed or
    not) for the deployment in REPOSITORY, running in the Triton server at --grpc-url.

    The front tokenizes with the deployment's tokenizer (its chat template for chat), calls
    the repository's router (or its aggregated model) with token ids, and stops a request on
    the server when its HTTP client hangs up. `pdtrt serve` starts one by itself; this command
    is for a front of its own, such as the front pod of a Kubernetes deployment. Serves until
    Ctrl-C / SIGTERM.
    """
    from pdtrt.front.server import FrontServer  # aiohttp: the server extra

    server = FrontServer(FrontOptions(repository=repository, grpc_url=grpc_url, host=host,
                                      port=port, api_key=api_key, chat_template=chat_template,
                                      stall_s=stall_s, tracing=_front_tracing(otlp_endpoint)))

    def ready(url: str) -> None:
        if as_json:
            emit_json({"openai": url, "grpc": grpc_url, "api_key": api_key is not None})
        else:
            click.echo(f"openai: {url}  (deployment at grpc {grpc_url})")

    server.run(on_ready=ready)


def _front_tracing(endpoint: str | None) -> TracingSettings | None:
    """The front pod's tracing: the endpoint, with the sampling and service prefix of the
    environment (``pdtrt deploy k8s`` writes them beside the endpoint)."""
    if endpoint is None:
        return None
    from_env = TracingSettings.from_env()
    if from_env is None:
        return TracingSettings(endpoint=endpoint)
    return TracingSettings(endpoint=endpoint, sample_ratio=from_env.sample_ratio,
                           service_prefix=from_env.service_prefix)
