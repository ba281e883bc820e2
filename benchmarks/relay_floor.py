"""The floor under a router in Triton's Python backend: CPU per relayed token of the least
relay that can be written there, beside pdtrt's router (issue 29, item 2).

    .venv/bin/python benchmarks/relay_floor.py [--concurrency 32] [--duration-s 20]
        [--rounds 2] [--json out.json] [--py-spy DIR] [--baseline-rev REV]

One server (:func:`router_capacity.start`, gRPC phase transport) holds the decode stand-in
(``decode_fixed``: an asyncio timer and one ``send`` per token at a fixed rate per stream,
nothing else), ``relay_min`` (:mod:`minimal_relay`: one raw grpc.aio read and one ``send`` per
token, nothing else) in front of it, and pdtrt's router (``router_fixed``) in front of the
stand-ins. The same closed loop of ``c`` users (router_bench's client) drives each in turn,
rounds interleaved. Per cell: delivered tokens/s and the CPU per token of the stub of the model
the users call (``/proc``, user + system, all threads), and the same per thread of the stub
(``/proc/PID/task``, largest first: the event loop's thread, gRPC's, the stub's own).

- ``decode_fixed`` called directly: what one ``send`` per token costs a Python-backend model
  (with a timer wake-up per token, as a relay has a wake-up per received token);
- ``relay_min``: one gRPC read + one ``send`` per token -- below it, no router built as a
  Python-backend model that receives over gRPC and sends one response per token can go;
- ``receive_only``: not a model -- a process of its own (this file, ``--receive-only``) that
  reads ``c`` concurrent decode streams over raw grpc.aio, as ``relay_min`` does, and sends
  nothing: what the gRPC half of a relay costs in Python; its CPU is that process's;
- ``router_fixed``: pdtrt's router, for the difference;
- ``naive_bls_32``: router_bench's naive BLS (:mod:`router_naive_bls`, 32 instances: sync
  ``execute``, a BLS iterator read per token), the design issue 29 measures the router against;
- ``router_base`` (with ``--baseline-rev REV``): pdtrt's router as of git revision ``REV``
  (router_bench's baseline) in front of the same stand-ins, so a change to the router is
  measured against its parent in one server, cells interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from router_bench import (  # noqa: E402
    User,
    add_baseline,
    cpu_s,
    loadavg,
    run_cell,
    spy,
    stat_cpu_s,
    stub_pids,
    summarize,
)
from router_capacity import _copy, stand_in_server  # noqa: E402

PATHS = ("decode_fixed", "receive_only", "relay_min", "relay_min_len", "router_fixed",
         "naive_bls_32")
RECEIVE_ONLY = "receive_only"
BASELINE = "router_base"


def _thread_cpu_s(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pids``, by thread id."""
    return {int(task.name): used for pid in pids for task in Path(f"/proc/{pid}/task").glob("*")
            if (used := stat_cpu_s(task / "stat")) is not None}


def _per_thread(before: dict[int, float], after: dict[int, float], tokens: int) -> list[float]:
    """µs per token of each thread that used any CPU, largest first."""
    used = (after[t] - before.get(t, 0.0) for t in after)
    return sorted((round(u / tokens * 1e6, 1) for u in used if u > 0 and tokens), reverse=True)


def _add_relay(repo: Path, url: str) -> None:
    for name, with_length in (("relay_min", "0"), ("relay_min_len", "1")):
        _copy(repo, "router_fixed", name, HERE / "minimal_relay.py", relay_url=url,
              relay_model="decode_fixed", relay_sequence_length=with_length)
    # router_bench's naive BLS, 32 instances, in front of the same stand-ins (router_fixed's
    # config names them as its prefill and decode models)
    _copy(repo, "router_fixed", "naive_bls_32", HERE / "router_naive_bls.py")
    config = repo / "naive_bls_32" / "config.pbtxt"
    config.write_text(re.sub(r"count: \d+", "count: 32", config.read_text()))


async def _receive(url: str, concurrency: int, output_tokens: int, duration_s: float
                   ) -> dict[str, float]:
    """``concurrency`` closed-loop decode streams of ``decode_fixed``, read and dropped."""
    import grpc
    import numpy as np
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.aio.insecure_channel(url))
    req = service_pb2.ModelInferRequest(model_name="decode_fixed")
    for name, value in (("input_ids", list(range(100, 164))), ("input_lengths", [64]),
                        ("request_output_len", [output_tokens])):
        array = np.array([value], dtype=np.int32)
        req.inputs.add(name=name, datatype="INT32", shape=list(array.shape))
        req.raw_input_contents.append(array.tobytes())
    req.outputs.add(name="output_ids")
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    tokens = 0
    deadline = time.perf_counter() + duration_s

    async def user() -> None:
        nonlocal tokens
        while time.perf_counter() < deadline:
            done = asyncio.Event()

            async def requests(done: asyncio.Event = done):
                yield req
                await done.wait()

            async for response in stub.ModelStreamInfer(requests()):
                infer = response.infer_response
                if infer.raw_output_contents:
                    tokens += np.frombuffer(infer.raw_output_contents[0], dtype=np.int32).size
                if infer.parameters["triton_final_response"].bool_param:
                    done.set()

    cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    await asyncio.gather(*(user() for _ in range(concurrency)))
    cpu1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"tokens": tokens, "tok_per_s": tokens / wall, "wall_s": wall,
            "stub_cpu_us_per_token": cpu / tokens * 1e6 if tokens else float("nan"),
            "cores": cpu / wall, "requests": tokens // output_tokens, "errors": 0,
            "ttft_ms_p50": float("nan"), "itl_ms_p50": float("nan")}


def _receive_cell(url: str, args: argparse.Namespace) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--receive-only", url,
                          "--concurrency", str(args.concurrency),
                          "--output-tokens", str(args.output_tokens),
                          "--duration-s", str(args.duration_s)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _profile(out: Path, repo: Path, users: list[User], paths: list[str],
             duration_s: float) -> None:
    """One cell of each of ``paths`` with py-spy recording the stub the users call
    (``out/<path>-stub0.txt``)."""
    out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        procs = spy(out, path, {"stub": stub_pids(repo, path)}, duration_s)
        run_cell(users, path, duration_s)
        for p in procs:
            p.wait(60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--stream-tokens-per-s", type=float, default=50.0)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--duration-s", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--py-spy", type=Path, help="after the rounds, one more cell of each model "
                    "path with py-spy recording its stub into this directory (not in the "
                    "results; benchmarks/router_profile.py reads the files)")
    ap.add_argument("--baseline-rev", default="", help=f"also {BASELINE}: the router of this "
                    "git revision (or of the pdtrt package in this directory)")
    ap.add_argument("--receive-only", metavar="URL", help=argparse.SUPPRESS)  # the subprocess
    args = ap.parse_args()
    if args.py_spy and not Path(sys.executable).with_name("py-spy").exists():
        ap.error("--py-spy needs py-spy in this environment: .venv/bin/pip install -e '.[profile]'")
    if args.receive_only:
        print(json.dumps(asyncio.run(_receive(args.receive_only, args.concurrency,
                                              args.output_tokens, args.duration_s))))
        return
    os.environ.setdefault("UCX_TLS", "sm,tcp")
    paths = args.paths.split(",") + ([BASELINE] if args.baseline_rev else [])

    def also(repo: Path, url: str) -> None:
        _add_relay(repo, url)
        if args.baseline_rev:
            add_baseline(repo.parent, repo, args.baseline_rev, 1, source="router_fixed")

    cells = []
    with stand_in_server(args.stream_tokens_per_s, "grpc", also=also) as (server, repo):
        users = [User(server.endpoints.grpc_url, list(range(100, 164)), args.output_tokens)
                 for _ in range(args.concurrency)]
        for path in paths:
            if path != RECEIVE_ONLY:
                run_cell(users[:4], path, 1.0)  # warm up
        for rnd in range(args.rounds):
            for path in paths[rnd % len(paths):] + paths[:rnd % len(paths)]:
                if path == RECEIVE_ONLY:
                    s = _receive_cell(server.endpoints.grpc_url, args)
                else:
                    pids = stub_pids(repo, path)
                    threads = _thread_cpu_s(pids)
                    before, t0 = cpu_s(pids), time.perf_counter()
                    records, wall = run_cell(users, path, args.duration_s)
                    used_s, took_s = cpu_s(pids) - before, time.perf_counter() - t0
                    s = summarize(records, wall, used_s)
                    s.update(cores=used_s / took_s,
                             threads_us_per_token=_per_thread(threads, _thread_cpu_s(pids),
                                                              s["tokens"]))
                s.update(path=path, round=rnd, c=args.concurrency, loadavg=loadavg())
                cells.append(s)
                print(json.dumps(s), file=sys.stderr, flush=True)
        if args.py_spy:
            _profile(args.py_spy, repo, users, [p for p in paths if p != RECEIVE_ONLY],
                     args.duration_s)
        for u in users:
            u.close()
    print("| round | path | delivered tok/s | TTFT p50 ms | ITL p50 ms | stub µs/token "
          "| stub cores | errors | largest threads µs/token |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in cells:
        top = " / ".join(f"{u:.0f}" for u in s.get("threads_us_per_token", [])[:4])
        print(f"| {s['round']} | {s['path']} | {s['tok_per_s']:.0f} | {s['ttft_ms_p50']:.1f} | "
              f"{s['itl_ms_p50']:.1f} | {s['stub_cpu_us_per_token']:.0f} | {s['cores']:.2f} | "
              f"{s['errors']} | {top} |")
    if args.json:
        args.json.write_text(json.dumps({"concurrency": args.concurrency,
                                         "stream_tokens_per_s": args.stream_tokens_per_s,
                                         "cells": cells}, indent=1))


if __name__ == "__main__":
    main()
