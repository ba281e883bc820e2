"""``pdtrt serve`` and ``pdtrt stop``: run a deployment in a real Triton server."""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from pathlib import Path

import click

from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT
from pdtrt.cli.front import front_options
from pdtrt.cli.render import emit_json, json_option
from pdtrt.engine_io import READINESS_PATH
from pdtrt.front.options import FrontOptions
from pdtrt.repo.generate import RepoMode
from pdtrt.serve.launcher import (
    pools_warnings,
    prepare,
    server_config,
    spawn_supervisor,
    stop_detached,
    tracing_settings,
    wait_front,
    write_state,
)
from pdtrt.serve.restarts import DEFAULT_MAX_RESTARTS, Restarter
from pdtrt.serve.supervisor import Supervisor, read_topology
from pdtrt.serve.triton_server import Endpoints, ServerConfig, TritonServer, free_port

_MIN_READY_WAIT_S = 30.0  # for the first health round after a slow start


@click.command("serve")
@click.argument("target", type=click.Path(exists=True, path_type=Path))
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the repository, server log and state go [default: out/<deployment>].")
@click.option("--engines-dir", type=click.Path(file_okay=False, path_type=Path),
              default=DEFAULT_ENGINES_ROOT, show_default=True, help="Root of the built engines.")
@click.option("--mode", type=click.Choice([m.value for m in RepoMode]), default="both",
              show_default=True, help="What to serve (from a spec): disaggregated, aggregated "
              "or both ensembles; pools: only the pools that have an endpoint, for another "
              "server's router (gRPC port default: the endpoint's).")
@click.option("--host", help="Listen address [default: the spec's serving.host, loopback].")
@click.option("--grpc-port", type=click.IntRange(1, 65535), help="gRPC port [default: free].")
@click.option("--http-port", type=click.IntRange(1, 65535), help="HTTP port [default: free].")
@click.option("--metrics-port", type=click.IntRange(1, 65535),
              help="Prometheus metrics port [default: free].")
@click.option("--tritonserver", type=click.Path(dir_okay=False, path_type=Path),
              help="Run this tritonserver binary instead of the embedded one (e.g. in NGC).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300,
              show_default=True, help="Seconds to wait until the deployment can serve.")
@click.option("--openai-port", type=click.IntRange(0, 65535),
              help="Port of the OpenAI-compatible front (/v1/chat/completions...) [default: "
              "free].")
@click.option("--no-openai", is_flag=True, help="Do not start the OpenAI front.")
@front_options
@click.option("--max-restarts", type=click.IntRange(min=0), default=DEFAULT_MAX_RESTARTS,
              show_default=True, help="Restart a Triton server that dies (same ports, same "
              "repository) at most this many times within ten minutes; 0: never, end with it.")
@click.option("--detach", is_flag=True, help="Start it, print the endpoints and return; a "
              "supervisor process keeps watching it; stop both with `pdtrt stop WORKDIR`.")
@json_option
def serve(target: Path, workdir: Path | None, engines_dir: Path, mode: str, host: str | None,
          grpc_port: int | None, http_port: int | None, metrics_port: int | None,
          tritonserver: Path | None, timeout_s: float, openai_port: int | None, no_openai: bool,
          api_key: str | None, chat_template: Path | None, stall_s: float,
          otlp_endpoint: str | None, max_restarts: int, detach: bool, as_json: bool) -> None:
    """Serve TARGET -- a spec (pdtrt.yaml) or a model repository directory.

    From a spec: builds the reference engines if they are missing, generates the repository
    (both ensembles by default), starts Triton with the KV-transfer environment, waits until
    every model is READY (or says which model failed and why) and every phase has a healthy
    endpoint (else it says which has none and serves anyway), prints the endpoints and serves
    until Ctrl-C / SIGTERM, then stops the server and its Python stubs.

    Beside Triton's ports it starts an OpenAI-compatible front (the `openai` endpoint:
    /v1/models, /v1/completions, /v1/chat/completions, streamed or not) over the router --
    or the aggregated model when there is no router; --no-openai leaves it out.

    With --otlp-traces-endpoint (or the spec's serving.tracing.endpoint) the front, the
    router and the engines export OpenTelemetry spans of every request over OTLP/HTTP,
    following a client's W3C traceparent (docs/tracing.md).

    Supervised, detached or not: a model whose Python-backend process died is reloaded
    without restarting the server, and /v2/models/health/ready answers 200 only while every
    phase has a healthy endpoint (the readiness to probe; /v2/health/ready does not know).
    A server that dies itself (Triton 2.51 can abort when a stub dies mid-response) is started
    again on the same ports, --max-restarts times at most within ten minutes.
    """
    say = (lambda _m: None) if as_json else (lambda m: click.echo(f"==> {m}", err=True))
    workdir = workdir or Path("out") / (target.stem if target.is_file() else target.name)
    workdir.mkdir(parents=True, exist_ok=True)
    prepared = prepare(target, workdir=workdir, engines_root=engines_dir, mode=RepoMode(mode),
                       progress=say)
    tracing = tracing_settings(prepared, otlp_endpoint)
    config = server_config(prepared, host=host, grpc_port=grpc_port, http_port=http_port,
                           metrics_port=metrics_port, tritonserver=tritonserver,
                           tracing=tracing)
    # Attached, the server dies with this process however it ends (even SIGKILL); detached, it
    # outlives it on purpose.
    config = dataclasses.replace(config, die_with_parent=not detach)
    warnings = pools_warnings(prepared, config)
    for text in warnings:
        click.echo(f"warning: {text}", err=True)
    # what the supervisor reads (pools, paths) is checked before any process starts: a
    # repository it cannot read must not leave a detached server behind
    topology = read_topology(prepared.repository)
    server = TritonServer(config)
    say(f"starting Triton on {prepared.repository} (log: {config.log_path})")
    start = time.monotonic()
    endpoints = server.start(timeout_s=timeout_s)
    supervisor = Supervisor.for_server(prepared.repository, grpc_url=endpoints.grpc_url,
                                       topology=topology, http_url=endpoints.http_url,
                                       metrics_url=endpoints.metrics_url)
    try:
        say("waiting until every phase has a healthy endpoint")
        health = supervisor.wait_ready(
            max(timeout_s - (time.monotonic() - start), _MIN_READY_WAIT_S))
    except BaseException:
        supervisor.close()
        server.stop()
        raise
    if not health.ready:  # e.g. pools in other servers not up yet: serve, and say so
        warnings.append("not ready yet (readiness says so until it is): "
                        + "; ".join(health.problems))
        click.echo(f"warning: {warnings[-1]}", err=True)
    readiness = f"http://{endpoints.http_url}{READINESS_PATH}"
    front_opts = None
    if prepared.mode in (None, RepoMode.POOLS):
        # a repository pdtrt did not generate has no tokenizer it knows; pools have no router
        if openai_port is not None and not no_openai:
            warnings.append("no OpenAI front: " + ("pools have no router or aggregated model"
                            if prepared.mode else "the repository was not generated by pdtrt "
                            "(no pdtrt-repo.json naming its tokenizer)"))
            click.echo(f"warning: {warnings[-1]}", err=True)
    elif not no_openai:
        front_opts = FrontOptions(repository=prepared.repository, grpc_url=endpoints.grpc_url,
                                  host=endpoints.host, port=openai_port or 0, api_key=api_key,
                                  chat_template=chat_template, stall_s=stall_s,
                                  tracing=tracing)
    front = None
    if front_opts is not None and not detach:
        from pdtrt.front.server import FrontServer  # aiohttp: the server extra

        front = FrontServer(front_opts)
        try:
            front.start()
        except BaseException:
            supervisor.close()
            server.stop()
            raise
    urls = endpoints.to_dict()
    if front is not None:
        urls["openai"] = front.url
    info = {"repository": str(prepared.repository), "log": str(config.log_path),
            "endpoints": urls, "readiness": readiness, "ready": health.ready,
            "built": list(prepared.built), "detached": detach, "warnings": warnings}
    if detach:
        supervisor.close()
        assert server._proc is not None  # noqa: SLF001 -- the pid outlives this command
        pid = server._proc.pid  # noqa: SLF001
        if front_opts is not None and not front_opts.port:
            front_opts = dataclasses.replace(front_opts, port=free_port(endpoints.host))
        # the state file first: the supervisor reads the server's configuration from it
        write_state(workdir, pid, endpoints, config.log_path, server.shm_prefix,
                    server=_same_ports(config, endpoints))
        watcher = spawn_supervisor(workdir, prepared.repository, endpoints, pid, front_opts,
                                   max_restarts=max_restarts)
        info["state"] = str(write_state(workdir, pid, endpoints, config.log_path,
                                         server.shm_prefix, supervisor_pid=watcher,
                                         server=_same_ports(config, endpoints)))
        if front_opts is not None:
            urls["openai"] = wait_front(front_opts, workdir, watcher)
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{'ready' if health.ready else 'serving'}: grpc {endpoints.grpc_url}  "
                   f"http {endpoints.http_url}  metrics {endpoints.metrics_url}")
        if "openai" in urls:
            click.echo(f"openai: {urls['openai']}")
        click.echo(f"readiness: {readiness}")
        click.echo(f"log: {config.log_path}")
        if detach:
            click.echo(f"detached (supervised); stop it with: pdtrt stop {workdir}")
    if detach:
        return
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    watching = threading.Thread(target=supervisor.run, args=(done,), name="pdtrt-supervisor",
                                daemon=True)
    watching.start()
    restarter = Restarter(config=config, endpoints=endpoints, max_restarts=max_restarts)
    try:
        while not done.wait(1.0):
            if server.running:
                continue
            if not max_restarts:
                raise click.ClickException(f"tritonserver exited; see {config.log_path}")
            pid, code, prefix = server.pid or 0, server.returncode, server.shm_prefix
            server.stop()  # what is left of it: stubs, its log file
            server = restarter.restart(old_pid=pid, old_shm_prefix=prefix, returncode=code)
    finally:
        done.set()
        watching.join(timeout=30)
        if front is not None:
            say("stopping the OpenAI front")
            front.stop()
        say("stopping Triton")
        server.stop()
        supervisor.close()


@click.command("stop")
@click.argument("workdir", type=click.Path(file_okay=False, path_type=Path))
@json_option
def stop(workdir: Path, as_json: bool) -> None:
    """Stop the server that `pdtrt serve --detach --workdir WORKDIR` started."""
    pid = stop_detached(workdir)
    if as_json:
        emit_json({"stopped": pid})
    else:
        click.echo(f"stopped tritonserver (pid {pid})")


def _same_ports(config: ServerConfig, endpoints: Endpoints) -> ServerConfig:
    """``config`` with the ports the server got (a restart must come back on them)."""
    return dataclasses.replace(config, host=endpoints.host, grpc_port=endpoints.grpc_port,
                               http_port=endpoints.http_port,
                               metrics_port=endpoints.metrics_port)
