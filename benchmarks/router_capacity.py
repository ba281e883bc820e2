"""How many tokens/s one router process relays before it is the bottleneck (issue 29, item 3).

    .venv/bin/python benchmarks/router_capacity.py [--concurrency 16,32,64,128]
        [--stream-tokens-per-s 50] [--output-tokens 64] [--duration-s 6] [--json out.json]
        [--phase-transport bls|grpc] [--stream-interval N]

The engines are not the limit here: the router (pdtrt's, one instance, from the reference
deployment's generated repository) calls stand-in phase models
(:mod:`fixed_rate_phase`, raw ``pb_utils``) that answer a prefill at once and stream a decode at
a fixed rate per stream (``--stream-tokens-per-s``, the inter-token time of a decode GPU at a
large batch) without any compute -- with ``--stream-interval N``, as TensorRT-LLM's
``stream_interval`` answers: the first token alone, then N tokens per response. Each cell is
a closed loop of ``c`` users (router_bench's client: one gRPC stream each,
``--output-tokens`` streamed tokens, counted per token); the demand is
``c x stream rate`` tokens/s. Per cell: delivered tokens/s, TTFT, ITL, and the CPU time of the
router's stub and of the stand-ins' stubs per token (``/proc``). The router saturates where its
stub reaches one core (its event loop and the GIL); the capacity is reported both as the
highest delivered rate and as ``1 s / router CPU per token`` at the largest cell -- the rate
one core would sustain -- which is what the deployment sizing uses.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from router_bench import ROOT, User, cpu_s, loadavg, run_cell, stub_pids, summarize  # noqa: E402

_TEXT_MODELS = ("preprocessing", "postprocessing", "ensemble", "ensemble_aggregated")


def _param(text: str, key: str, value: str) -> str:
    pattern = re.compile(f'(key: "{key}"' + r'\n\s*value: \{ string_value: ")[^"]*(")')
    new, n = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
    assert n == 1, key
    return new


def _copy(repo: Path, source: str, name: str, model_py: Path | None, **params: str) -> None:
    target = repo / name
    shutil.copytree(repo / source, target)
    config = target / "config.pbtxt"
    text = re.sub(r'^name: "[^"]+"', f'name: "{name}"', config.read_text(), flags=re.M)
    for key, value in params.items():
        if f'key: "{key}"' in text:
            text = _param(text, key, value)
        else:
            text += f'\nparameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
    config.write_text(text)
    if model_py is not None:
        shutil.copyfile(model_py, target / "1" / "model.py")


def _per_token(cpu_s_used: float, tokens: int) -> float:
    return cpu_s_used / tokens * 1e6 if tokens else float("nan")


def start(work: Path, rate: float, transport: str = "bls",
          also: Callable[[Path, str], None] | None = None, stream_interval: int = 1):
    """The reference repository's router as ``router_fixed`` (its pools pointed at the
    stand-ins), with ``prefill_fixed`` and ``decode_fixed``; nothing else is in it.
    ``transport``: how the router calls them -- ``bls`` (the same server, pdtrt's default) or
    ``grpc`` (the same server, as if it were another: tritonclient's gRPC streams). ``also``
    adds models to the repository before the server starts (it gets the repository and the
    server's gRPC address)."""
    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer, free_port

    prepared = prepare(ROOT / "docs/examples/reference-cpu.yaml", workdir=work,
                       engines_root=work / "engines")
    repo = prepared.repository
    for name in _TEXT_MODELS:
        shutil.rmtree(repo / name, ignore_errors=True)
    stand_in = HERE / "fixed_rate_phase.py"
    _copy(repo, "prefill", "prefill_fixed", stand_in, bench_tokens_per_s=str(rate))
    _copy(repo, "decode", "decode_fixed", stand_in, bench_tokens_per_s=str(rate),
          bench_stream_interval=str(stream_interval))
    grpc_port = free_port("127.0.0.1")
    url = f"127.0.0.1:{grpc_port}" if transport == "grpc" else ""
    _copy(repo, "router", "router_fixed", None, prefill_model="prefill_fixed",
          decode_model="decode_fixed", aggregated_model="", prefill_url=url, decode_url=url)
    if also is not None:
        also(repo, f"127.0.0.1:{grpc_port}")
    for name in ("prefill", "decode", "aggregated", "router", "health"):
        shutil.rmtree(repo / name, ignore_errors=True)  # no engine stubs on the 2 cores
    config = server_config(prepared, grpc_port=grpc_port)
    # a stub that dies says where, in the server log (Python stacks of every thread)
    server = TritonServer(dataclasses.replace(config, env={**config.env,
                                                           "PYTHONFAULTHANDLER": "1"}))
    server.start(timeout_s=600)  # loads the repository's models: the three above
    return server, repo


@contextlib.contextmanager
def stand_in_server(rate: float, transport: str = "bls",
                    also: Callable[[Path, str], None] | None = None, stream_interval: int = 1
                    ) -> Iterator[tuple[Any, Path]]:
    """:func:`start` in a folder of its own; afterwards the server is stopped (its stubs with
    it) and the folder removed -- also when the benchmark is ended by SIGTERM (``timeout``),
    which Python otherwise ends without running ``finally``: a stub with a request in flight
    would outlive its server."""
    work = Path(tempfile.mkdtemp(prefix="pdtrt-stand-ins-"))
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        server, repo = start(work, rate, transport, also, stream_interval)
        try:
            yield server, repo
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        signal.signal(signal.SIGTERM, previous)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="16,32,64,128")
    ap.add_argument("--stream-tokens-per-s", type=float, default=50.0)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--duration-s", type=float, default=6.0)
    ap.add_argument("--phase-transport", choices=("bls", "grpc"), default="bls",
                    help="how the router calls the stand-ins (grpc: as another server's)")
    ap.add_argument("--stream-interval", type=int, default=1,
                    help="tokens per decode response after the first (TensorRT-LLM's "
                    "stream_interval)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("UCX_TLS", "sm,tcp")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    cells = []
    with stand_in_server(args.stream_tokens_per_s, args.phase_transport,
                         stream_interval=args.stream_interval) as (server, repo):
        url = server.endpoints.grpc_url
        users = [User(url, list(range(100, 100 + args.prompt_tokens)), args.output_tokens)
                 for _ in range(max(concurrency))]
        run_cell(users[:4], "router_fixed", 1.0)  # warm up
        router, phases = stub_pids(repo, "router_fixed"), \
            stub_pids(repo, "prefill_fixed") + stub_pids(repo, "decode_fixed")
        triton = [server._proc.pid]  # tritonserver itself: its gRPC frontend serves the phases
        for c in concurrency:                                   # when --phase-transport grpc
            before_r, before_p, before_t = cpu_s(router), cpu_s(phases), cpu_s(triton)
            t0 = time.perf_counter()
            records, wall = run_cell(users[:c], "router_fixed", args.duration_s)
            s = summarize(records, wall, cpu_s(router) - before_r)
            s.update(c=c, demand_tok_per_s=c * args.stream_tokens_per_s,
                     router_cores=(cpu_s(router) - before_r) / (time.perf_counter() - t0),
                     stand_in_cpu_us_per_token=_per_token(cpu_s(phases) - before_p, s["tokens"]),
                     tritonserver_cpu_us_per_token=_per_token(cpu_s(triton) - before_t,
                                                              s["tokens"]),
                     loadavg=loadavg())
            cells.append(s)
            print(json.dumps(s), file=sys.stderr, flush=True)
        for u in users:
            u.close()
    last = cells[-1]
    out = {"phase_transport": args.phase_transport, "stream_interval": args.stream_interval,
           "stream_tokens_per_s": args.stream_tokens_per_s, "output_tokens": args.output_tokens,
           "cells": cells, "max_delivered_tok_per_s": max(c["tok_per_s"] for c in cells),
           "one_core_tok_per_s": 1e6 / last["stub_cpu_us_per_token"]}
    print("| c | demand tok/s | delivered tok/s | TTFT p50 ms | ITL p50 ms | router µs/token "
          "| router cores | stand-in µs/token | tritonserver µs/token | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in cells:
        print(f"| {s['c']} | {s['demand_tok_per_s']:.0f} | {s['tok_per_s']:.0f} | "
              f"{s['ttft_ms_p50']:.1f} | {s['itl_ms_p50']:.1f} | "
              f"{s['stub_cpu_us_per_token']:.0f} | {s['router_cores']:.2f} | "
              f"{s['stand_in_cpu_us_per_token']:.0f} | "
              f"{s['tritonserver_cpu_us_per_token']:.0f} | {s['errors']} |")
    print(f"\nmax delivered: {out['max_delivered_tok_per_s']:.0f} tok/s; one router core at the "
          f"last cell's CPU per token: {out['one_core_tok_per_s']:.0f} tok/s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
