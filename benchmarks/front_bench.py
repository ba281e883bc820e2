"""What the OpenAI front costs (issue 28 item 4): TTFT, per-token latency and front CPU.

    .venv/bin/python benchmarks/front_bench.py [--concurrency 1,32] [--requests-per-user 4]
        [--prompt-words 40] [--output-tokens 32] [--rounds 2] [--json out.json]

Starts the CPU reference deployment (``docs/examples/reference-cpu.yaml``, both paths) in the
embedded Triton 2.51 and ``pdtrt front`` as a process of its own against it, then runs three
paths, greedy, the same prompt text and ``--output-tokens`` streamed tokens (end id ignored):

- ``router``: gRPC straight to the ``router`` model with the token ids the front would send
  (the front's own back end, without the front) -- front minus this is the front's price;
- ``front``: ``POST /v1/completions`` with ``stream: true`` to the front, SSE read with aiohttp;
- ``ensemble``: gRPC to ``ensemble`` (text in, text out through the pre/post-processing models),
  what a tritonclient user calls.

Each cell is a closed loop of ``c`` users doing ``--requests-per-user`` requests each, all from
one asyncio loop in this process. Per cell: TTFT p50 / mean (send -> first response with
tokens), per-token latency (per request: (last - first) / (responses - 1), mean over requests),
and for the front its process's CPU time (user + system, ``/proc/<pid>/stat``) per output
token. Rounds interleave the paths so the machine's other load falls on all of them alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("UCX_TLS", "sm,tcp")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")

from pdtrt.client.streams import GrpcStreamClient  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


class _TextGrpc(GrpcStreamClient):
    """The gRPC client, with BYTES tensors serialized as Triton wants them (the ensemble)."""

    @staticmethod
    def request(model, inputs, *, request_id, parameters, outputs):
        from tritonclient.grpc import service_pb2
        from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor

        req = service_pb2.ModelInferRequest(model_name=model, id=request_id)
        for name, value in inputs.items():
            req.inputs.add(name=name, datatype=np_to_triton_dtype(value.dtype),
                           shape=list(value.shape))
            raw = (serialize_byte_tensor(value).item() if value.dtype == object
                   else np.ascontiguousarray(value).tobytes())
            req.raw_input_contents.append(raw)
        for name in outputs:
            req.outputs.add(name=name)
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req


async def _timed(responses) -> list[float]:
    times = []
    async for r in responses:
        if r.error is not None:
            raise RuntimeError(r.error)
        times.append(time.perf_counter())
    return times


class Paths:
    def __init__(self, grpc_url: str, front_url: str, tokenizer: Any, prompt: str, n: int):
        from pdtrt.engine_io import RequestSampling
        from pdtrt.front.engine_client import engine_inputs
        from pdtrt.front.protocol import OpenAIRequest

        self.grpc, self.front_url, self.n, self.prompt = GrpcStreamClient(grpc_url), front_url, n, \
            prompt
        self.text_grpc = _TextGrpc(grpc_url)
        sampling = OpenAIRequest(max_tokens=n, sampling=RequestSampling(temperature=0.0, top_p=1.0),
                                 stop=(), ignore_eos=True, stream=True, include_usage=False)
        self.router_inputs = engine_inputs(tokenizer.encode(prompt), sampling, max_tokens=n,
                                           end_id=tokenizer.eos_id, pad_id=tokenizer.pad_id)
        self.ensemble_inputs = {
            "text_input": np.array([[prompt.encode()]], dtype=object),
            "max_tokens": np.array([[n]], dtype=np.int32),
            "end_id": np.array([[-1]], dtype=np.int32),
            "stream": np.array([[True]]), "exclude_input_in_output": np.array([[True]])}
        self.session: Any = None
        self.count = 0

    def _id(self) -> str:
        self.count += 1
        return f"fb-{self.count}"

    async def router(self) -> list[float]:
        return await _timed(self.grpc.stream("router", self.router_inputs, request_id=self._id(),
                                             parameters={}, outputs=["output_ids"]))

    async def ensemble(self) -> list[float]:
        return await _timed(self.text_grpc.stream("ensemble", self.ensemble_inputs,
                                                  request_id=self._id(), parameters={},
                                                  outputs=["text_output"]))

    async def front(self) -> list[float]:
        body = {"model": "pdtrt/tiny-llama", "prompt": self.prompt, "max_tokens": self.n,
                "temperature": 0, "ignore_eos": True, "stream": True}
        times = []
        async with self.session.post(self.front_url + "/completions", json=body) as r:
            assert r.status == 200, await r.text()
            async for line in r.content:
                if line.startswith(b"data: {"):
                    times.append(time.perf_counter())
        return times[:-1]  # the last chunk carries the finish reason, no token


async def run_cell(paths: Paths, path: str, c: int, per_user: int) -> dict[str, float]:
    call = getattr(paths, path)
    ttfts, itls, tokens = [], [], 0

    async def user() -> None:
        nonlocal tokens
        for _ in range(per_user):
            start = time.perf_counter()
            times = await call()
            ttfts.append(times[0] - start)
            if len(times) > 1:
                itls.append((times[-1] - times[0]) / (len(times) - 1))
            tokens += len(times)

    await asyncio.gather(*(user() for _ in range(c)))
    return {"ttft_p50_ms": statistics.median(ttfts) * 1e3,
            "ttft_mean_ms": statistics.fmean(ttfts) * 1e3,
            "itl_mean_ms": statistics.fmean(itls) * 1e3, "responses": tokens}


async def main_async(args, grpc_url: str, front_url: str, front_pid: int, tokenizer) -> dict:
    import aiohttp

    prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * 8).split()
    paths = Paths(grpc_url, front_url, tokenizer, " ".join(prompt[:args.prompt_words]),
                  args.output_tokens)
    results: dict[str, dict[str, list[dict]]] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        paths.session = session
        for name in ("router", "front", "ensemble"):  # warm-up
            await getattr(paths, name)()
        order = ["router", "front", "ensemble"]
        for rnd in range(args.rounds):
            for c in args.concurrency:
                for path in order[rnd % 3:] + order[:rnd % 3]:
                    before = cpu_s(front_pid)
                    cell = await run_cell(paths, path, c, args.requests_per_user)
                    if path == "front":
                        cell["front_cpu_us_per_response"] = (
                            (cpu_s(front_pid) - before) / cell["responses"] * 1e6)
                    results.setdefault(str(c), {}).setdefault(path, []).append(cell)
                    print(f"round {rnd} c={c} {path}: {cell}", file=sys.stderr)
    return results


def summarize(results: dict) -> dict:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for c, by_path in results.items():
        for path, cells in by_path.items():
            keys = [k for k in cells[0] if k != "responses"]
            out.setdefault(c, {})[path] = {k: statistics.median(x[k] for x in cells)
                                           for k in keys}
        if "front" in out[c] and "router" in out[c]:
            f, r = out[c]["front"], out[c]["router"]
            out[c]["front_minus_router"] = {"ttft_p50_ms": f["ttft_p50_ms"] - r["ttft_p50_ms"],
                                            "itl_mean_ms": f["itl_mean_ms"] - r["itl_mean_ms"]}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", default="1,32",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--requests-per-user", type=int, default=4)
    parser.add_argument("--prompt-words", type=int, default=40)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from pdtrt.front.deployment import ServedDeployment
    from pdtrt.front.text import FrontTokenizer
    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer

    work = Path(tempfile.mkdtemp(prefix="pdtrt-front-bench-"))
    prepared = prepare(ROOT / "docs/examples/reference-cpu.yaml", workdir=work,
                       engines_root=work / "engines")
    server = TritonServer(server_config(prepared))
    endpoints = server.start(timeout_s=600)
    front = subprocess.Popen([str(Path(sys.executable).with_name("pdtrt")), "front",
                              str(prepared.repository), "--grpc-url", endpoints.grpc_url,
                              "--port", "0", "--json"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [front.stdout.readline()]
        while lines[-1] not in ("}\n", ""):
            lines.append(front.stdout.readline())
        if lines[-1] == "":  # it died before serving: its error is on stderr (above)
            raise SystemExit(f"pdtrt front exited with {front.wait()} before serving")
        front_url = json.loads("".join(lines))["openai"]
        tokenizer = FrontTokenizer.load(ServedDeployment.from_repository(prepared.repository)
                                        .tokenizer_dir)
        load = os.getloadavg()
        results = asyncio.run(main_async(args, endpoints.grpc_url, front_url, front.pid,
                                         tokenizer))
        report = {"machine": {"cpus": os.cpu_count(), "loadavg_start": load,
                              "loadavg_end": os.getloadavg()},
                  "args": {k: (str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items()},
                  "summary": summarize(results), "cells": results}
        print(json.dumps(report["summary"], indent=2))
        if args.json:
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        front.terminate()
        front.wait(30)
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
