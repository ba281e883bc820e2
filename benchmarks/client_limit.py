"""How many concurrent streams / streams per second can one pdtrt client process drive?

Serves the fake_llm test fixture (tests/triton_models/fake_llm, *not* an LLM) in the embedded
Triton with a per-token sleep long enough that the server mostly waits, then runs closed-loop
benchmarks at rising concurrency and open-loop ones at rising rates through pdtrt.bench, and
reports what the client achieved and what it cost: client CPU seconds per streamed response
(``time.process_time`` of this process, which also runs nothing else), peak open streams and
threads, and the open-loop send lag (how late requests left against their Poisson schedule).

    .venv/bin/python benchmarks/client_limit.py [--delay-ms 20] [--osl 32]
        [--concurrency 64,128,256,512] [--rates 50,100,200] [--requests 512]

Prints one JSON object per run and a summary table (markdown) at the end.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.bench import (  # noqa: E402
    BenchConfig,
    LoopKind,
    RequestPlan,
    parse_length,
    run_bench,
)
from pdtrt.client import LLMClient  # noqa: E402
from pdtrt.serve.triton_server import ServerConfig, TritonServer  # noqa: E402


def serve(tmp: Path, delay_ms: float) -> TritonServer:
    model = tmp / "repo" / "ensemble"
    shutil.copytree(ROOT / "tests" / "triton_models" / "fake_llm", model)
    config = model / "config.pbtxt"
    config.write_text(re.sub(r'string_value: "[\d.]+"', f'string_value: "{delay_ms:g}"',
                             config.read_text()))
    server = TritonServer(ServerConfig(repository=tmp / "repo", log_path=tmp / "server.log"))
    server.start(timeout_s=120)
    return server


def one(url: str, config: BenchConfig) -> dict[str, object]:
    peak_threads = [threading.active_count()]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.05):
            peak_threads[0] = max(peak_threads[0], threading.active_count())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with LLMClient(url) as client:
        cpu0, wall0 = time.process_time(), time.monotonic()
        report = run_bench(client, config)
        cpu_s, wall_s = time.process_time() - cpu0, time.monotonic() - wall0
        streams = client.num_open_streams
    stop.set()
    s = report.runs[0].summary
    responses = s.output_tokens
    return {
        "loop": str(config.loop),
        "load": config.concurrency if config.loop is LoopKind.CLOSED else config.rates_per_s[0],
        "requests_ok": s.num_ok, "errors": s.num_errors,
        "tokens_counted": s.output_tokens, "tokens_requested": s.requested_tokens,
        "request_per_s": round(s.request_per_s, 1),
        "responses_per_s": round(s.output_tok_per_s, 1),
        "client_cpu_s": round(cpu_s, 2), "wall_s": round(wall_s, 2),
        "client_cpu_us_per_response": round(cpu_s / max(responses, 1) * 1e6, 1),
        "streams_open_at_end": streams, "peak_threads": peak_threads[0],
        "ttft_p50_ms": round(s.ttft_ms.p50 or 0, 1), "ttft_p99_ms": round(s.ttft_ms.p99 or 0, 1),
        "itl_p50_ms": round(s.itl_ms.p50 or 0, 1), "itl_p99_ms": round(s.itl_ms.p99 or 0, 1),
        "lag_p99_ms": None if s.lag_ms.p99 is None else round(s.lag_ms.p99, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--osl", type=int, default=32)
    ap.add_argument("--concurrency", default="64,128,256,512")
    ap.add_argument("--rates", default="50,100,200")
    ap.add_argument("--requests", type=int, default=512)
    args = ap.parse_args()
    workload = RequestPlan(isl=parse_length("16"), osl=parse_length(str(args.osl)), seed=0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pdtrt-client-limit-") as tmp:
        server = serve(Path(tmp), args.delay_ms)
        try:
            assert server.endpoints is not None
            url = server.endpoints.grpc_url
            for c in [int(x) for x in args.concurrency.split(",") if x]:
                cfg = BenchConfig(loop=LoopKind.CLOSED, concurrency=c, workload=workload,
                                  num_requests=max(args.requests, 2 * c), num_warmup=c,
                                  timeout_s=120)
                rows.append(one(url, cfg))
                print(json.dumps(rows[-1]), flush=True)
            for r in [float(x) for x in args.rates.split(",") if x]:
                cfg = BenchConfig(loop=LoopKind.OPEN, rates_per_s=(r,), workload=workload,
                                  num_requests=args.requests, num_warmup=8, timeout_s=120)
                rows.append(one(url, cfg))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            server.stop()
    cols = ["loop", "load", "requests_ok", "errors", "tokens_counted", "request_per_s",
            "responses_per_s", "client_cpu_us_per_response", "peak_threads", "ttft_p50_ms",
            "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "lag_p99_ms"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
