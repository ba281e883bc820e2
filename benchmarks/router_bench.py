"""The router side by side with the engine model alone and a naive BLS (issue 18).

    .venv/bin/python benchmarks/router_bench.py [--concurrency 1,8,32,64] [--rounds 2]
        [--duration-s 3] [--router-instances 1] [--bls-instances 1,8,32] [--json out.json]
        [--py-spy DIR]

Starts the CPU reference deployment (``docs/examples/reference-cpu.yaml``) in the embedded
Triton 2.51 once, with extra models added to its repository before the start:

- ``router_<K>``: pdtrt's router with ``K`` instances (the generated ``router``'s files, count
  changed) -- ``router`` itself is the spec's (1 instance);
- ``naive_bls_<N>``: :mod:`router_naive_bls` (sync ``execute``, one request per instance, no
  early first token) with ``N`` instances, the I/O of the router.

Every path reaches the same engine stubs: ``aggregated`` (engine alone: both phases in one
model instance), ``prefill`` and ``decode`` (the router and the naive BLS). One more path, at
concurrency 1 only, calls ``prefill`` directly with the router's context-only request ("prefill
alone"): the router's TTFT less its TTFT is the router's own cost per request.

Each cell is a closed loop of ``c`` users (one pre-opened tritonclient gRPC stream each,
greedy, ``--prompt-tokens`` prompt, ``--output-tokens`` streamed tokens) that start requests
for ``--duration-s`` and then finish those in flight. Rounds are interleaved: every round runs
every (concurrency, path) cell once, in an order rotated per round, so the machine's other load
falls on all paths alike and ratios within one run are meaningful.

Per cell: TTFT mean/p50/p90 (client-side, from the send to the first response with tokens),
ITL (per request: (last token time - first token time) / (tokens - 1), then mean and p50 over
requests -- a response that carries several tokens counts for all of them), output tokens/s
(tokens of completed requests / wall time of the cell), and the CPU time (user + system, from
``/proc/<pid>/stat``) of the path's own stubs (router or naive-BLS processes) per output token.
The machine's load average is recorded at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

os.environ.setdefault("UCX_TLS", "sm,tcp")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")

_TICKS = os.sysconf("SC_CLK_TCK")
# The path that calls the prefill model directly (context-only), as the router's first call
# does: its TTFT is what the router's own per-request cost is measured against.
PREFILL_ALONE = "prefill-alone"


# -- the server --------------------------------------------------------------------------------
def _copy_model(repo: Path, source: str, name: str, count: int, model_py: Path | None) -> None:
    """``repo/name``: ``repo/source``'s config with its name and instance count changed, and
    ``model_py`` (or ``source``'s own) as version 1."""
    target = repo / name
    shutil.copytree(repo / source, target)
    config = target / "config.pbtxt"
    text = re.sub(r'^name: "[^"]+"', f'name: "{name}"', config.read_text(), flags=re.M)
    text = re.sub(r"count: \d+", f"count: {count}", text)
    config.write_text(text)
    if model_py is not None:
        shutil.copyfile(model_py, target / "1" / "model.py")


_BASELINE_SHIM = """# router_bench.py: pdtrt's router as of {rev}, from {src}
import sys

sys.path.insert(0, {src!r})
import triton_python_backend_utils as pb_utils  # noqa: E402

from pdtrt.runtime.router.model import TritonPythonModel as PdtrtModel  # noqa: E402
from pdtrt.runtime.triton_io import BackendTriton  # noqa: E402


class TritonPythonModel(PdtrtModel):
    def __init__(self) -> None:
        super().__init__(BackendTriton(pb_utils))
"""


def add_baseline(work: Path, repo: Path, rev: str, instances: int, source: str = "router"
                 ) -> str:
    """``router_base``: the router of git revision ``rev`` (``git archive``, nothing in the
    work tree changes) -- or, when ``rev`` is a directory, of the ``pdtrt`` package in it --
    its stubs importing pdtrt from that copy (the config of model ``source``); returns the
    model name."""
    if Path(rev).is_dir():
        src = Path(rev).resolve()
    else:
        src = work / "baseline_src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "pdtrt"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shim = work / "baseline_model.py"
    shim.write_text(_BASELINE_SHIM.format(rev=rev, src=str(src)))
    _copy_model(repo, source, "router_base", instances, shim)
    return "router_base"


_TEXT_MODELS = ("preprocessing", "postprocessing", "ensemble", "ensemble_aggregated")


def start_server(work: Path, router_instances: list[int], bls_instances: list[int],
                 baseline_rev: str = "", start_timeout_s: float = 900):
    """The reference deployment, then the benchmark's own models loaded one at a time (dozens
    of stubs starting at once on 2 busy cores made Triton 2.51 abort its start with
    ``boost::interprocess::lock_exception``)."""
    import tritonclient.http as httpclient

    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer

    prepared = prepare(ROOT / "docs/examples/reference-cpu.yaml", workdir=work,
                       engines_root=work / "engines")
    repo = prepared.repository
    for name in _TEXT_MODELS:  # token ids in and out: the tokenizer models are not on the path
        shutil.rmtree(repo / name, ignore_errors=True)
    server = TritonServer(server_config(prepared))  # loads the repository's models at start
    extra = []
    for k in router_instances:
        if k != 1:
            _copy_model(repo, "router", f"router_{k}", k, None)
            extra.append(f"router_{k}")
    if baseline_rev:
        extra.append(add_baseline(work, repo, baseline_rev, 1))
    for n in bls_instances:
        _copy_model(repo, "router", f"naive_bls_{n}", n, HERE / "router_naive_bls.py")
        extra.append(f"naive_bls_{n}")
    server.start(timeout_s=start_timeout_s)
    client = httpclient.InferenceServerClient(server.endpoints.http_url, network_timeout=900)
    try:
        for name in extra:
            client.load_model(name)
    except Exception:
        server.stop()
        raise
    finally:
        client.close()
    return server, repo


def stub_pids(repo: Path, model: str) -> list[int]:
    """The Python-backend stub processes of ``model`` (argv[1] is the model's path)."""
    prefix = f"{repo}{os.sep}{model}{os.sep}"
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1].decode(errors="replace").startswith(prefix):
            pids.append(int(entry.name))
    return pids


def stat_cpu_s(stat: Path) -> float | None:
    """User + system CPU seconds in a ``/proc`` ``stat`` file (a process's or a thread's);
    None when it is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)


def cpu_s(pids: list[int]) -> float:
    return sum(s for pid in pids if (s := stat_cpu_s(Path(f"/proc/{pid}/stat"))) is not None)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# -- the client --------------------------------------------------------------------------------
@dataclass
class Record:
    start_s: float
    token_s: list[float] = field(default_factory=list)  # one per token (coalesced: same time)
    responses: int = 0  # responses with tokens
    error: str | None = None
    end_s: float = 0.0


def _input(name: str, value: np.ndarray) -> Any:
    """A tritonclient gRPC input holding ``value``."""
    import tritonclient.grpc as g
    from tritonclient.utils import np_to_triton_dtype

    x = g.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    x.set_data_from_numpy(value)
    return x


class User:
    """One closed-loop user: one gRPC stream, one request at a time."""

    def __init__(self, url: str, ids: list[int], output_tokens: int) -> None:
        import tritonclient.grpc as g

        self.inputs = [_input("input_ids", np.array([ids], dtype=np.int32)),
                       _input("input_lengths", np.array([[len(ids)]], dtype=np.int32)),
                       _input("request_output_len", np.array([[output_tokens]], dtype=np.int32)),
                       _input("streaming", np.array([[True]])),
                       _input("exclude_input_in_output", np.array([[True]]))]
        self.results: queue.Queue = queue.Queue()
        self.serial = 0
        self.client = g.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.results.put(
            (time.perf_counter(), result, error)))

    def one(self, model: str) -> Record:
        if model == PREFILL_ALONE:
            return self.prefill_alone()
        rec = Record(start_s=time.perf_counter())
        self.client.async_stream_infer(model, self.inputs, enable_empty_final_response=True)
        return self._collect(rec)

    def _collect(self, rec: Record) -> Record:
        """``rec`` filled with the responses of the request just sent, to its final one."""
        while True:
            wait_s = float(os.environ.get("BENCH_WAIT_S", "300"))
            now, result, error = self.results.get(timeout=wait_s)
            if error is not None:
                rec.error = str(error)
                break
            ids = result.as_numpy("output_ids")
            if ids is not None and ids.size:
                rec.token_s += [now] * int(ids.size)
                rec.responses += 1
            if result.get_response().parameters["triton_final_response"].bool_param:
                break
        rec.end_s = time.perf_counter()
        return rec

    def prefill_alone(self) -> Record:
        """The router's first call, made by the client itself: a context-only request to the
        ``prefill`` model (its answer: the first token and the KV hand-off), then -- not timed
        -- the stop request that frees the KV it holds, as the router's ``_free_kv`` does."""
        self.serial += 1
        request_id = f"bench-prefill-{id(self)}-{self.serial}"
        rec = Record(start_s=time.perf_counter())
        inputs = [*self.inputs[:3], _input("streaming", np.array([[False]])),
                  _input("exclude_input_in_output", np.array([[True]]))]
        self.client.async_stream_infer("prefill", inputs, request_id=request_id,
                                       parameters={"request_type": "context_only"},
                                       enable_empty_final_response=True)
        self._collect(rec)
        stop = [*self.inputs[:3], _input("stop", np.array([[True]]))]
        self.client.async_stream_infer("prefill", stop, request_id=request_id,
                                       enable_empty_final_response=True)
        self._collect(Record(start_s=time.perf_counter()))
        return rec

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def run_cell(users: list[User], model: str, duration_s: float) -> tuple[list[Record], float]:
    records: list[Record] = []
    lock = threading.Lock()
    start = time.perf_counter()
    deadline = start + duration_s

    def loop(user: User) -> None:
        while time.perf_counter() < deadline:
            rec = user.one(model)
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=loop, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.perf_counter() - start


def summarize(records: list[Record], wall_s: float, cpu: float) -> dict[str, float]:
    ok = [r for r in records if r.error is None and r.token_s]
    ttft = sorted((r.token_s[0] - r.start_s) * 1000 for r in ok)
    itl = [(r.token_s[-1] - r.token_s[0]) * 1000 / (len(r.token_s) - 1)
           for r in ok if len(r.token_s) > 1]
    tokens = sum(len(r.token_s) for r in ok)

    def pct(q: float) -> float:
        return float(np.percentile(ttft, q)) if ttft else float("nan")

    return {"requests": len(ok), "errors": len(records) - len(ok), "tokens": tokens,
            "ttft_ms_mean": statistics.mean(ttft) if ttft else float("nan"),
            "ttft_ms_p50": pct(50), "ttft_ms_p90": pct(90),
            "itl_ms_mean": statistics.mean(itl) if itl else float("nan"),
            "itl_ms_p50": statistics.median(itl) if itl else float("nan"),
            "tok_per_s": tokens / wall_s, "wall_s": wall_s,
            "tokens_per_response": tokens / max(1, sum(r.responses for r in ok)),
            "stub_cpu_us_per_token": cpu / tokens * 1e6 if tokens else float("nan")}


# -- py-spy ------------------------------------------------------------------------------------
def spy(out: Path, label: str, pids: dict[str, list[int]], seconds: float) -> list[Any]:
    """Start ``py-spy record`` (raw collapsed stacks, on-CPU samples) on each process."""
    procs = []
    spy_bin = Path(sys.executable).with_name("py-spy")
    for name, ps in pids.items():
        for i, pid in enumerate(ps):
            path = out / f"{label}-{name}{i}.txt"
            procs.append(subprocess.Popen(
                [str(spy_bin), "record", "--pid", str(pid), "--duration", str(int(seconds)),
                 "--rate", "250", "--format", "raw", "--nonblocking", "--threads",
                 "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return procs


def measure(repo: Path, users: list[User], model: str, duration_s: float
            ) -> dict[str, Any]:
    """One cell: ``users`` in a closed loop on ``model``; its stubs' CPU from /proc."""
    pids = stub_pids(repo, model) if model not in ("aggregated", PREFILL_ALONE) else []
    before = cpu_s(pids)
    records, wall = run_cell(users, model, duration_s)
    s: dict[str, Any] = summarize(records, wall, cpu_s(pids) - before if pids else float("nan"))
    s["loadavg"] = loadavg()
    if s["errors"]:
        s["first_error"] = next(str(r.error) for r in records if r.error)
    return s


def profile(out: Path, repo: Path, users: list[User], paths: list[tuple[str, str, int]],
            concurrency: list[int], duration_s: float) -> None:
    """Cells of the router paths with py-spy attached (raw stacks into ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    for c in concurrency:
        for label, model, _ in paths:
            if not model.startswith("router"):
                continue
            procs = spy(out, f"{model}-c{c}", {
                "router": stub_pids(repo, model), "decode": stub_pids(repo, "decode"),
                "prefill": stub_pids(repo, "prefill"), "client": [os.getpid()]}, duration_s)
            s = measure(repo, users[:c], model, duration_s)
            for p in procs:
                p.wait(60)
            print(json.dumps({"profiled": label, "c": c, **s}), file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", default="1,8,32,64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration-s", type=float, default=3.0)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--router-instances", default="1")
    ap.add_argument("--bls-instances", default="1,8,32")
    ap.add_argument("--max-queue", type=int, default=8,
                    help="skip a naive BLS cell whose users exceed its instances by more than "
                    "this factor (its requests would only queue; bounds the runtime)")
    ap.add_argument("--paths", default="", help="only these models (comma list)")
    ap.add_argument("--baseline-rev", default="",
                    help="also run the router of this git revision, or of the pdtrt package in "
                    "this directory (model router_base)")
    ap.add_argument("--start-timeout-s", type=float, default=900,
                    help="the server's start (torch in three engine stubs: minutes when busy)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--py-spy", type=Path, help="after the rounds, one more pass over the "
                    "router paths at --py-spy-c, with py-spy recording the router, prefill and "
                    "decode stubs and this client into this directory (not in the results)")
    ap.add_argument("--py-spy-c", default="1,32")
    args = ap.parse_args()
    if args.py_spy and not Path(sys.executable).with_name("py-spy").exists():
        ap.error("--py-spy needs py-spy in this environment: .venv/bin/pip install -e '.[profile]'")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    routers = [int(k) for k in args.router_instances.split(",")]
    blss = [int(n) for n in args.bls_instances.split(",") if n]

    import tempfile

    work = Path(tempfile.mkdtemp(prefix="pdtrt-router-bench-"))
    t0 = time.time()
    server, repo = start_server(work, routers, blss, args.baseline_rev, args.start_timeout_s)
    paths = ([("engine", "aggregated", 1), ("prefill alone (c = 1)", PREFILL_ALONE, 1)]
             + [(f"router×{k}", "router" if k == 1 else f"router_{k}", k) for k in routers]
             + ([(f"router×1 at {args.baseline_rev}", "router_base", 1)]
                if args.baseline_rev else [])
             + [(f"naive_bls×{n}", f"naive_bls_{n}", n) for n in blss])
    if args.paths:
        wanted = set(args.paths.split(","))
        paths = [p for p in paths if p[1] in wanted]
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "loadavg_start": loadavg(), "cpus": os.cpu_count(),
            "server_start_s": round(time.time() - t0, 1), "args": vars(args) | {
                "json": str(args.json), "py_spy": str(args.py_spy)}}
    print(json.dumps(meta), file=sys.stderr, flush=True)
    ids = [1] + [(7 * i) % 500 + 3 for i in range(args.prompt_tokens - 1)]
    cells: dict[tuple[str, int], list[dict[str, float]]] = {}
    users: list[User] = []
    try:
        users = [User(server.endpoints.grpc_url, ids, args.output_tokens)
                 for _ in range(max(concurrency))]
        for _, model, _ in paths:  # warm-up: one request per path
            users[0].one(model)
        for rnd in range(args.rounds):
            order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
            for c in concurrency:
                for label, model, instances in order:
                    if model.startswith("naive_bls") and c > instances * args.max_queue:
                        continue
                    if model == PREFILL_ALONE and c != 1:  # a TTFT reference, not a load
                        continue
                    s = measure(repo, users[:c], model, args.duration_s)
                    cells.setdefault((label, c), []).append(s)
                    print(json.dumps({"round": rnd, "path": label, "c": c, **s}),
                          file=sys.stderr, flush=True)
        if args.py_spy:
            profile(args.py_spy, repo, users, paths, [int(c) for c in args.py_spy_c.split(",")],
                    args.duration_s)
    finally:
        for u in users:
            u.close()
        server.stop()
    meta["loadavg_end"] = loadavg()
    meta["total_s"] = round(time.time() - t0, 1)
    table = report(cells, paths, concurrency)
    print(json.dumps(meta))
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "cells": [
            {"path": k[0], "c": k[1], "rounds": v} for k, v in cells.items()]}, indent=1))


def _mean(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.mean(r[key] for r in rounds)


def report(cells: dict[tuple[str, int], list[dict[str, float]]], paths: list[tuple[str, str, int]],
           concurrency: list[int]) -> str:
    """A markdown table: each cell's metrics averaged over its rounds."""
    lines = ["| c | path | req | err | TTFT mean / p50 / p90 ms | ITL mean / p50 ms | tok/s | "
             "stub CPU µs/token | vs engine tok/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in concurrency:
        engine = cells.get(("engine", c))
        for label, _, _ in paths:
            rounds = cells.get((label, c))
            if not rounds:
                continue
            tps = _mean(rounds, "tok_per_s")
            rel = f"{tps / _mean(engine, 'tok_per_s'):.2f}×" if engine else "–"
            cpu = _mean(rounds, "stub_cpu_us_per_token")
            lines.append(
                f"| {c} | {label} | {sum(int(r['requests']) for r in rounds)} | "
                f"{sum(int(r['errors']) for r in rounds)} | "
                f"{_mean(rounds, 'ttft_ms_mean'):.1f} / {_mean(rounds, 'ttft_ms_p50'):.1f} / "
                f"{_mean(rounds, 'ttft_ms_p90'):.1f} | {_mean(rounds, 'itl_ms_mean'):.2f} / "
                f"{_mean(rounds, 'itl_ms_p50'):.2f} | {tps:.0f} | "
                f"{'–' if cpu != cpu else f'{cpu:.0f}'} | {rel} |")  # NaN: no stub of its own
    return "\n".join(lines)


if __name__ == "__main__":
    main()
