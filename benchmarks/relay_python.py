"""The router's own Python per relayed token, without a server: what relay_floor.py cannot
separate from its noise (issue 44).

    PYTHONPATH=. .venv/bin/python benchmarks/relay_python.py [--concurrency 32]
        [--output-tokens 4,64,512] [--tokens-per-cell 40000] [--profile] [--json out.json]
        [--pdtrt DIR]   # the pdtrt package in DIR instead, e.g. a revision's:
                        # git archive REV pdtrt | tar -x -C DIR

pdtrt's router model runs unchanged on the fake Triton seam of the unit tests
(``tests/runtime/fake_triton.py``), its pools set to gRPC endpoints whose stub is a stand-in:
each call answers with real ``ModelStreamInferResponse`` protobufs (the prefill one token and a
hand-off, the decode one token a response, the last flagged final), one per event-loop turn, so
the router's gRPC client parses them as it parses the server's. Its responses go through
``BackendTriton.send`` into a stand-in ``pb_utils`` that keeps nothing. So the CPU measured is
the router's Python -- routing, the reader task, the liveness watch, the reply, the parse, the
metrics and timeline bookkeeping (its counters summed as in the stub, sent every 0.1 s to a
seam that only adds them up) -- and none of Triton's IPC, which costs the same per token for
any relay, and none of the round trips only the router makes (cancel checks, metric updates).
Beside it, the same users through ``relay_min_len``'s loop (minimal_relay.py: read,
``np.frombuffer``, two tensors, send) over the same stand-in stream: the floor's Python.

Each row: process CPU per token over ``c`` concurrent requests of ``n`` output tokens, repeated
until about ``--tokens-per-cell`` tokens. Two or more ``--output-tokens`` values split it into
a per-request and a per-token part (a straight line through the first and the last).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _source() -> Path:
    """Where pdtrt is imported from: ``--pdtrt DIR`` (read before the import), else here."""
    if "--pdtrt" in sys.argv[:-1]:
        return Path(sys.argv[sys.argv.index("--pdtrt") + 1]).resolve()
    return ROOT


sys.path[:0] = [str(_source()), str(ROOT)]

from tritonclient.grpc import service_pb2  # noqa: E402

from pdtrt.client import streams  # noqa: E402
from pdtrt.engine_io import Param  # noqa: E402
from pdtrt.runtime.router.model import TritonPythonModel  # noqa: E402
from pdtrt.runtime.triton_io import BackendTriton  # noqa: E402
from tests.runtime.fake_triton import FakeRequest, FakeTriton, model_args  # noqa: E402

FIRST = 7
HAND_OFF = np.frombuffer(b'{"stand-in": "no KV"}', dtype=np.uint8).reshape(1, -1)


def _response(outputs: dict[str, np.ndarray], final: bool) -> Any:
    r = service_pb2.ModelStreamInferResponse()
    for name, value in outputs.items():
        r.infer_response.outputs.add(name=name, datatype="INT32" if value.dtype == np.int32
                                     else "UINT8", shape=list(value.shape))
        r.infer_response.raw_output_contents.append(value.tobytes())
    if final:
        r.infer_response.parameters["triton_final_response"].bool_param = True
    return r


class _Call:
    """A ModelStreamInfer call: the prefill's one answer or ``n`` decode answers, one per
    event-loop turn (as responses arrive from the network)."""

    def __init__(self, requests: AsyncIterator[Any], answers: dict[str, list[Any]]) -> None:
        self._requests, self._answers, self._done = requests, answers, False

    def done(self) -> bool:
        return self._done

    def cancel(self) -> None:
        self._done = True

    async def _responses(self) -> AsyncIterator[Any]:
        request = await anext(aiter(self._requests))
        for r in self._answers[request.model_name]:
            await asyncio.sleep(0)
            yield r
        self._done = True

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._responses()


class _Stub:  # GRPCInferenceServiceStub
    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers

    def ModelStreamInfer(self, requests: AsyncIterator[Any]) -> _Call:  # noqa: N802
        return _Call(requests, self.answers)


class _PbUtils:
    """What ``BackendTriton.send`` calls of ``pb_utils``: objects that keep nothing."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

    class Tensor:
        __slots__ = ("name", "value")

        def __init__(self, name: str, value: np.ndarray) -> None:
            self.name, self.value = name, value

    class InferenceResponse:
        __slots__ = ("tensors",)

        def __init__(self, output_tensors: Any = ()) -> None:
            self.tensors = output_tensors


class _Seam(FakeTriton):
    """The unit tests' fake seam, but responses go through the real ``BackendTriton.send``."""

    _pb, _final = _PbUtils, _PbUtils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    _tensors = BackendTriton._tensors
    send = BackendTriton.send

    def close(self, request: Any) -> None:
        request.sender.send(flags=self._final)


class _Sender(FakeRequest):
    tokens = 0  # sent by every sender: each cell checks that its requests got their tokens

    def send(self, response: Any = None, flags: int = 0) -> None:  # pb_utils' sender
        for t in () if response is None else response.tensors:
            if t.name == "output_ids":
                _Sender.tokens += t.value.size


def _requests(c: int, n: int) -> list[_Sender]:
    return [_Sender(f"r{i}", {"input_ids": np.array([list(range(100, 164))], dtype=np.int32),
                              "input_lengths": np.array([64], dtype=np.int32),
                              "request_output_len": np.array([n], dtype=np.int32),
                              "streaming": np.array([True])}) for i in range(c)]


def _router_cell(c: int, n: int, repeats: int) -> float:
    """CPU seconds of ``repeats`` batches of ``c`` requests through the router."""
    decode = [_response({"output_ids": np.array([[[FIRST + k]]], dtype=np.int32)}, k == n - 1)
              for k in range(n)]
    stub = _Stub({"prefill": [_response({"output_ids": np.array([[[FIRST]]], dtype=np.int32),
                                         "context_phase_params": HAND_OFF}, True)],
                  "decode": decode})
    streams.GrpcStreamClient._service = lambda self: stub  # type: ignore[method-assign]
    model = TritonPythonModel(_Seam())
    model.initialize(model_args("router", {
        Param.PREFILL_MODEL: "prefill", Param.DECODE_MODEL: "decode", Param.AGGREGATED_MODEL: "",
        Param.AGGREGATED_BELOW_TOKENS: "0", Param.PREFILL_URL: "127.0.0.1:1",
        Param.DECODE_URL: "127.0.0.1:1", Param.PROBE_INTERVAL_S: "0"}))

    async def main() -> float:
        await model.execute(_requests(c, n))  # warm-up
        t0 = time.process_time()
        for _ in range(repeats):
            await model.execute(_requests(c, n))
        return time.process_time() - t0

    _Sender.tokens = 0
    try:
        cpu_s = asyncio.run(main())
    finally:
        model.finalize()
    _check(_Sender.tokens, (repeats + 1) * c * n, "router")
    return cpu_s


def _check(sent: int, expected: int, who: str) -> None:
    if sent != expected:  # a failing path would look cheap
        raise SystemExit(f"{who}: {sent} tokens sent, {expected} expected")


def _floor_cell(c: int, n: int, repeats: int) -> float:
    """The same through minimal_relay.py's loop."""
    stub = _Stub({"decode": [_response({"output_ids": np.array([[FIRST + k]], dtype=np.int32)},
                                       k == n - 1) for k in range(n)]})
    pb = _PbUtils

    async def relay() -> None:
        done = asyncio.Event()
        sender = _Sender()
        req = service_pb2.ModelInferRequest(model_name="decode")

        async def requests() -> AsyncIterator[Any]:
            yield req
            await done.wait()

        async for response in stub.ModelStreamInfer(requests()):
            infer = response.infer_response
            if infer.raw_output_contents:
                ids = np.frombuffer(infer.raw_output_contents[0], dtype=np.int32).reshape(1, -1)
                sender.send(pb.InferenceResponse(output_tensors=[
                    pb.Tensor("output_ids", ids),
                    pb.Tensor("sequence_length", np.array([[ids.shape[-1]]], dtype=np.int32))]))
            if infer.parameters["triton_final_response"].bool_param:
                done.set()
        sender.send(flags=1)

    async def main() -> float:
        t0 = time.process_time()
        for _ in range(repeats):
            await asyncio.gather(*(relay() for _ in range(c)))
        return time.process_time() - t0

    _Sender.tokens = 0
    cpu_s = asyncio.run(main())
    _check(_Sender.tokens, repeats * c * n, "floor")
    return cpu_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--output-tokens", default="4,64,512")
    ap.add_argument("--tokens-per-cell", type=int, default=40000)
    ap.add_argument("--profile", action="store_true",
                    help="cProfile the router cells: the 25 costliest functions (own time)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--pdtrt", type=Path, help="import pdtrt from this directory (a baseline)")
    args = ap.parse_args()
    c = args.concurrency
    rows = []
    profile = cProfile.Profile() if args.profile else None
    for n in (int(x) for x in args.output_tokens.split(",")):
        repeats = max(1, args.tokens_per_cell // (c * n))
        tokens = repeats * c * n
        if profile is not None:
            profile.enable()
        router_s = _router_cell(c, n, repeats)
        if profile is not None:
            profile.disable()
        floor_s = _floor_cell(c, n, repeats)
        rows.append({"output_tokens": n, "tokens": tokens,
                     "router_us_per_token": router_s / tokens * 1e6,
                     "floor_us_per_token": floor_s / tokens * 1e6})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"pdtrt from {streams.__file__.rsplit('/pdtrt/', 1)[0]}")
    print(f"c = {c}\n\n| output tokens | router µs CPU / token | floor µs CPU / token "
          "| difference |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['output_tokens']} | {r['router_us_per_token']:.1f} | "
              f"{r['floor_us_per_token']:.1f} | "
              f"{r['router_us_per_token'] - r['floor_us_per_token']:+.1f} |")
    split = {}
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        for who in ("router", "floor"):
            ya, yb = a[f"{who}_us_per_token"], b[f"{who}_us_per_token"]
            per_request = (ya - yb) / (1 / a["output_tokens"] - 1 / b["output_tokens"])
            split[who] = {"per_request_us": per_request,
                          "per_token_us": yb - per_request / b["output_tokens"]}
        print("\n| | per request µs | per token µs |\n|---|---|---|")
        for who, s in split.items():
            print(f"| {who} | {s['per_request_us']:.0f} | {s['per_token_us']:.1f} |")
    if profile is not None:
        pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    if args.json:
        args.json.write_text(json.dumps({"concurrency": c, "rows": rows, "split": split},
                                        indent=1))


if __name__ == "__main__":
    main()
