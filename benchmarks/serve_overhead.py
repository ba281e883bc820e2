"""Router overhead and KV-transfer bandwidth of the CPU reference deployment.

    .venv/bin/python benchmarks/serve_overhead.py [--requests 20] [--output-tokens 32]
    .venv/bin/python benchmarks/serve_overhead.py --smoke   # seconds: smallest settings

1. Starts the reference deployment (`docs/examples/reference-cpu.yaml`, both paths) in the
   embedded Triton and sends the same token-id requests, one at a time, (a) straight to the
   `aggregated` engine model and (b) to the `router` model (router -> prefill -> UCX KV pull ->
   decode). The difference is the price of the router and the phase hand-off, per request (TTFT)
   and per streamed token (ITL).
2. KV transfer: the server's own UCX pull time per request (Prometheus metrics), against a raw
   ucxx tagged send of the same number of bytes between two processes, and pdtrt's pull
   protocol (`UcxKVNode`) outside Triton, at that size and at 1 MiB and 16 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import statistics
import time
import traceback
import urllib.request

import numpy as np

os.environ.setdefault("UCX_TLS", "sm,tcp")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")


def stream(url: str, model: str, ids: list[int], n: int) -> list[float]:
    import tritonclient.grpc as g

    def t(name, value, dtype):
        x = g.InferInput(name, list(value.shape), dtype)
        x.set_data_from_numpy(value)
        return x

    inputs = [t("input_ids", np.array([ids], dtype=np.int32), "INT32"),
              t("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
              t("request_output_len", np.array([[n]], dtype=np.int32), "INT32"),
              t("streaming", np.array([[True]]), "BOOL"),
              t("exclude_input_in_output", np.array([[True]]), "BOOL")]
    results: queue.Queue = queue.Queue()
    client = g.InferenceServerClient(url)
    times = []
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        start = time.perf_counter()
        client.async_stream_infer(model, inputs, enable_empty_final_response=True)
        while True:
            result, error = results.get(timeout=120)
            if error is not None:
                raise RuntimeError(str(error))
            resp = result.get_response()
            if resp.outputs:
                times.append(time.perf_counter() - start)
            if resp.parameters["triton_final_response"].bool_param:
                return times
    finally:
        client.stop_stream()
        client.close()


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{"))


def _peer(target, conn) -> None:
    """Run a peer's body; its error goes back through the pipe, so the parent fails at once
    with the peer's own traceback instead of waiting for a message that never comes."""
    try:
        target(conn)
    except BaseException:
        conn.send(("peer-error", traceback.format_exc()))
        raise


def _recv(conn, proc, timeout_s: float = 120.0):
    """The peer's next message; raises with the peer's error if it failed or died."""
    deadline = time.monotonic() + timeout_s
    while not conn.poll(0.1):
        if not proc.is_alive() and not conn.poll(0):
            raise RuntimeError(f"peer process exited with code {proc.exitcode} (see its "
                               "output above)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"peer process sent nothing in {timeout_s:g} s")
    message = conn.recv()
    if isinstance(message, tuple) and message[:1] == ("peer-error",):
        raise RuntimeError(f"peer process failed:\n{message[1]}")
    return message


def _raw_peer(conn) -> None:
    import ucxx

    async def main():
        conn.send(bytes(memoryview(ucxx.get_worker_address())))
        while True:
            size = conn.recv()
            if size is None:
                return
            buf = np.empty(size, dtype=np.uint8)
            conn.send("ready")
            await ucxx.recv(buf, tag=11)
            conn.send("got")

    asyncio.run(main())


def raw_ucxx(sizes: list[int], repeats: int) -> dict[int, float]:
    """Mean seconds of one tagged send of SIZE bytes to another process (endpoint reused)."""
    import ucxx

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_peer, args=(_raw_peer, child), daemon=True)
    proc.start()
    address = _recv(parent, proc)
    out = {}

    async def run():
        ep = await ucxx.create_endpoint_from_worker_address(
            ucxx.get_ucx_address_from_buffer(address), endpoint_error_handling=False)
        for size in sizes:
            data = np.ones(size, dtype=np.uint8)
            samples = []
            for _ in range(repeats):
                parent.send(size)
                _recv(parent, proc)
                t0 = time.perf_counter()
                await ep.send(data, tag=11, force_tag=True)
                while not parent.poll(0):
                    if not proc.is_alive():
                        break  # _recv raises with the peer's error
                    await asyncio.sleep(0)
                _recv(parent, proc)
                samples.append(time.perf_counter() - t0)
            out[size] = statistics.median(samples)

    asyncio.run(run())
    parent.send(None)
    proc.join(10)
    return out


def _offer_peer(conn) -> None:
    from pdtrt.llmapi.reference.kv_transfer import UcxKVNode

    node = UcxKVNode(hold_s=60, pull_timeout_s=60)
    node.start()
    conn.send(node.address)
    while True:
        size = conn.recv()
        if size is None:
            return
        conn.send(node.offer(np.ones(size, dtype=np.uint8)))


def pdtrt_pull(sizes: list[int], repeats: int) -> dict[int, float]:
    from pdtrt.llmapi.reference.kv_transfer import UcxKVNode

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_peer, args=(_offer_peer, child), daemon=True)
    proc.start()
    address = _recv(parent, proc)
    node = UcxKVNode(hold_s=60, pull_timeout_s=60)
    node.start()
    out = {}
    for size in sizes:
        samples = []
        for _ in range(repeats):
            parent.send(size)
            tid = _recv(parent, proc)
            t0 = time.perf_counter()
            node.pull(address, tid, size)
            samples.append(time.perf_counter() - t0)
        out[size] = statistics.median(samples)
    parent.send(None)
    proc.join(10)
    node.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=20, help="samples per KV transfer size")
    ap.add_argument("--smoke", action="store_true",
                    help="smallest settings (2 requests, 4 tokens, 2 repeats): a check it runs")
    args = ap.parse_args()
    if args.smoke:
        args.requests, args.output_tokens, args.prompt_tokens, args.repeats = 2, 4, 8, 2
    from _reference import start_reference_server

    server = start_reference_server("pdtrt-bench-serve-")
    ep = server.endpoints
    assert ep is not None
    result: dict[str, object] = {"requests": args.requests, "prompt_tokens": args.prompt_tokens,
                                 "output_tokens": args.output_tokens}
    try:
        ids = [1] + [(7 * i) % 500 + 3 for i in range(args.prompt_tokens - 1)]
        for model in ("aggregated", "router"):
            stream(ep.grpc_url, model, ids, 4)  # warm-up
            ttft, itl = [], []
            for _ in range(args.requests):
                times = stream(ep.grpc_url, model, ids, args.output_tokens)
                ttft.append(times[0] * 1000)
                itl += [(b - a) * 1000 for a, b in zip(times, times[1:], strict=False)]
            result[model] = {"ttft_ms_mean": statistics.mean(ttft),
                             "ttft_ms_p50": statistics.median(ttft),
                             "itl_ms_mean": statistics.mean(itl),
                             "itl_ms_p50": statistics.median(itl)}
        n = metric(ep.metrics_url, "pdtrt_kv_transfers_total")
        nbytes = metric(ep.metrics_url, "pdtrt_kv_transfer_bytes_total")
        seconds = metric(ep.metrics_url, "pdtrt_kv_transfer_seconds_total")
        result["triton_kv_pull"] = {"transfers": n, "bytes_each": nbytes / n,
                                    "ms_each": seconds / n * 1000,
                                    "gb_per_s": nbytes / seconds / 1e9}
    finally:
        server.stop()
    kv_size = int(result["triton_kv_pull"]["bytes_each"])
    sizes = [kv_size] if args.smoke else [kv_size, 1 << 20, 16 << 20]
    raw = raw_ucxx(sizes, args.repeats)
    pull = pdtrt_pull(sizes, args.repeats)
    result["outside_triton"] = {str(s): {"raw_ucxx_ms": raw[s] * 1000,
                                         "raw_ucxx_gb_per_s": s / raw[s] / 1e9,
                                         "pdtrt_pull_ms": pull[s] * 1000,
                                         "pdtrt_pull_gb_per_s": s / pull[s] / 1e9}
                                for s in sizes}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
