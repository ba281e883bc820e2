"""Soak and load of the CPU reference deployment under `pdtrt serve` (issue 15, item 7).

    .venv/bin/python benchmarks/soak.py --burst 500 --duration-s 0            # 500 at once
    .venv/bin/python benchmarks/soak.py --duration-s 1800 --rate 2 --streams 64 \\
        --kill-every-s 180 --cancel-share 0.1 --seed 0                          # the full soak

Starts `pdtrt serve SPEC` (supervised: a phase whose process dies is reloaded) on loopback and
free ports, then, over Triton gRPC streams to the `router` model (token ids, so every token is
checked, and the model a client cancels at): first `--burst` requests at once, then Poisson
arrivals at `--rate` per second for `--duration-s` (at most `--streams` in flight; an arrival
waits for a free stream), a `--cancel-share` of them cancelled by the client after a random
number of tokens, and every `--kill-every-s` the prefill or the decode process (alternately)
killed with SIGKILL. Prompts are seeded random token ids; each completed request must carry
exactly the greedy continuation `transformers` computes for its prompt (EOS off), a cancelled
or failed one a prefix of it. Everything is seeded (`--seed`), bounded in time (the duration,
a per-request timeout) and in count (rate x duration + burst).

`--pools` (issue 43) serves `docs/examples/reference-cpu-pools.yaml` (two prefill and two decode
endpoints on one server) and kills, every `--kill-every-s`, one endpoint drawn at random (seeded)
from every phase model of the pools: the router retries a prefill elsewhere and migrates a
decode's streams to the other endpoint, so here a failed request is a failed soak, kills or not.
`--layout servers` puts every endpoint of the pools in a `pdtrt serve --mode pools` server of its
own (free loopback ports) and the router, the ensembles and the aggregated baseline in a front
server that dials them over gRPC -- the one-server-per-host layout on one host: Triton 2.51 can
abort a whole server when a stub dies mid-response (docs/design/serve.md, "owner-dead mutex"),
which takes one endpoint there, never the router and the streams it holds.

`--mix` (issue 24) sends a seeded mix instead: token-id streams to the router (the only ones a
client cancels), and text requests to `ensemble` and `ensemble_aggregated`, streaming and not
(checked for a clean end; their text is not compared). Every run counts the Python-backend
stubs that died -- the supervisor's "stub died" lines beyond the kills it was told of -- and new
faults of Triton processes in the kernel log, and exits 1 when there is any (or, without kills,
any failed request): a soak that would have caught the router stub's crash.

Recorded: requests ok / failed / cancelled, the router's retries and fallbacks (its metrics),
tokens lost, duplicated or changed, TTFT and ITL p50 / p99 per `--window-s`, each kill and how
long until `/v2/models/health/ready` said 200 again, and every `--sample-every-s`: RSS and
threads of the server and each stub, open sockets (server, stubs, this client), held KV
buffers, the server's `/dev/shm` regions. Writes `soak.json` and `soak.md` into `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("prefill", "decode")


# -- the server ----------------------------------------------------------------------------------
@dataclass
class Server:
    proc: subprocess.Popen[str]  # pdtrt serve
    info: dict

    @property
    def pid(self) -> int:
        """tritonserver's pid (a child of pdtrt serve)."""
        return next(p for p in _children(self.proc.pid) if "tritonserver" in _cmdline(p))

    def stub(self, model: str) -> int | None:
        return next((p for p in _children(self.pid) if f"{model}_0_0" in _cmdline(p)), None)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError):
                continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def start_server(spec: Path, workdir: Path, timeout_s: float, *, engines: Path | None = None,
                 extra: tuple[str, ...] = ()) -> Server:
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [str(Path(sys.executable).parent / "pdtrt"), "serve", str(spec), "--workdir",
           str(workdir), "--engines-dir", str(engines or workdir / "engines"), "--json",
           "--timeout", str(timeout_s), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(workdir / "serve.err", "w"),
                            text=True, cwd=ROOT)
    text = ""
    while True:  # its --json object, printed once it serves (indented: several lines)
        line = proc.stdout.readline()
        if not line:  # it exited: fail now, with its own error
            err = (workdir / "serve.err").read_text(errors="replace").strip().splitlines()
            raise SystemExit(f"pdtrt serve exited with {proc.wait()} before serving: "
                             + "\n".join(err[-20:]))
        text += line
        if line.startswith("}"):
            info = json.loads(text)
            if "endpoints" not in info:  # its --json error object: it failed to start
                proc.wait(60)
                raise SystemExit(f"pdtrt serve failed: {json.dumps(info)}")
            return Server(proc, info)


def stop_server(server: Server, timeout_s: float = 60) -> dict:
    """SIGTERM `pdtrt serve` as a supervisor would; what it left behind."""
    pid, prefix = server.pid, _shm_prefix(server.pid)
    stubs = _children(pid)
    before = _segfaults()
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    code = server.proc.wait(timeout_s)
    while Path(f"/proc/{pid}").exists() and time.monotonic() - start < timeout_s:
        time.sleep(0.2)
    after = _segfaults()
    crashed = None if before is None or after is None else sorted(
        line for line in after - before if any(f"[{stub}]" in line for stub in stubs))
    log = Path(server.info["log"]).read_text(errors="replace")
    return {"serve_exit": code, "stop_s": round(time.monotonic() - start, 2),
            "stub_segfaults": crashed, "exit_timeout_hit": "Exit timeout expired" in log,
            "shm_left": sorted(p.name for p in Path("/dev/shm").glob(f"{prefix}*"))}


@dataclass
class Fleet:
    """The servers of one soak: the front (router, ensembles) and, with ``--layout servers``,
    one server per pool endpoint (model name -> its server); else every model is the front's."""

    front: Server
    workdir: Path
    hosts: dict[str, Server] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)  # every Triton process seen: faults are theirs

    @property
    def servers(self) -> list[Server]:
        return [self.front, *self.hosts.values()]

    def host(self, model: str) -> Server:
        return self.hosts.get(model, self.front)

    def watch(self) -> None:
        """Remember the Triton processes now alive (kernel-log faults are counted for them)."""
        for server in self.servers:
            try:
                self.pids.update([server.pid, *_children(server.pid)])
            except StopIteration:  # a server between its death and its restart
                pass


def split_specs(spec: Path, into: Path) -> tuple[Path, dict[str, Path]]:
    """``--layout servers``: the front's spec (every pool endpoint remote, each on a free
    loopback port) and, per endpoint, the spec its ``--mode pools`` server serves."""
    import copy

    import yaml

    from pdtrt.serve.triton_server import free_port

    raw = yaml.safe_load(spec.read_text())
    pools = {phase: [e["model"] for e in raw[phase]["endpoints"]] for phase in PHASES}
    urls = {m: f"127.0.0.1:{free_port('127.0.0.1')}" for models in pools.values()
            for m in models}
    front = copy.deepcopy(raw)
    for phase, models in pools.items():
        front[phase]["endpoints"] = [{"model": m, "url": urls[m]} for m in models]
    into.mkdir(parents=True, exist_ok=True)
    (front_path := into / "front.yaml").write_text(yaml.safe_dump(front, sort_keys=False))
    per: dict[str, Path] = {}
    for phase, models in pools.items():
        other = next(p for p in PHASES if p != phase)
        for m in models:
            one = copy.deepcopy(raw)
            one[phase]["endpoints"] = [{"model": m, "url": urls[m]}]
            one[other]["endpoints"] = [{"model": other}]  # local: not served by --mode pools
            per[m] = into / f"{m}.yaml"
            per[m].write_text(yaml.safe_dump(one, sort_keys=False))
    return front_path, per


def start_fleet(args: argparse.Namespace, workdir: Path) -> Fleet:
    if args.layout == "one":
        return Fleet(start_server(args.spec, workdir / "front", 600, engines=workdir / "engines"),
                     workdir)
    front_spec, per = split_specs(args.spec, workdir / "specs")
    hosts: dict[str, Server] = {}
    try:  # the endpoints first (the first one builds the engines): the front finds them up
        for model, spec in per.items():
            hosts[model] = start_server(spec, workdir / model, 600, engines=workdir / "engines",
                                        extra=("--mode", "pools", "--no-openai"))
        front = start_server(front_spec, workdir / "front", 600, engines=workdir / "engines")
    except BaseException:
        for server in hosts.values():
            stop_server(server)
        raise
    return Fleet(front, workdir, hosts)


def stop_fleet(fleet: Fleet) -> dict:
    """The front first (its router stops calling), then each endpoint's server."""
    out = stop_server(fleet.front)
    if fleet.hosts:
        out["endpoint_servers"] = {m: stop_server(s) for m, s in fleet.hosts.items()}
    return out


def _segfaults() -> set[str] | None:
    """The kernel log's segfault lines (None: not readable here)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    return {ln for ln in out.stdout.splitlines() if "segfault" in ln} if out.returncode == 0 \
        else None


def _triton_faults() -> set[str] | None:
    """The kernel log's faults of Triton's server and stub processes (None: not readable)."""
    out = subprocess.run(["dmesg"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None
    return {ln for ln in out.stdout.splitlines()
            if ("triton_python_b" in ln or "tritonserver" in ln)
            and any(w in ln for w in ("segfault", "general protection", "trap", "error"))}


def stub_deaths(fleet: Fleet) -> list[str]:
    """The supervisors' "stub died" lines in the `pdtrt serve` logs."""
    out = []
    for log in fleet.workdir.glob("*/serve.err"):
        out += [ln for ln in log.read_text(errors="replace").splitlines() if "stub died" in ln]
    return out


def _shm_prefix(server_pid: int) -> str:
    key = "shm-region-prefix-name="
    return next(a.split(key)[1] for a in _cmdline(server_pid).split() if key in a)


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def _ready(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2/models/health/ready",
                                    timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


# -- the oracle ----------------------------------------------------------------------------------
def make_prompts(repository: Path, num: int, max_tokens: int, rng: np.random.Generator
                 ) -> list[tuple[list[int], list[int]]]:
    """``num`` seeded token-id prompts and the greedy continuation of each (EOS off)."""
    import torch
    from transformers import AutoModelForCausalLM

    manifest = json.loads((repository / "pdtrt-repo.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(manifest["engine_dirs"]["prefill"],
                                                 local_files_only=True).eval()
    vocab = int(model.config.vocab_size)
    out = []
    for _ in range(num):
        ids = [int(t) for t in rng.integers(3, vocab, size=int(rng.integers(8, 64)))]
        gen = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
        out.append((ids, gen[0, len(ids):].tolist()))
    return out


# -- one request ---------------------------------------------------------------------------------
@dataclass
class Record:
    index: int
    start_s: float  # since the run began
    prompt: int
    cancel_after: int | None
    target: str = "router"  # one of TARGETS
    tokens: list[int] = field(default_factory=list)
    times_s: list[float] = field(default_factory=list)  # per response, since the run began
    error: str | None = None
    final: bool = False
    cancelled: bool = False


def _request(rec: Record, ids: list[int], max_tokens: int):
    """A ``ModelStreamInferRequest`` for the router, empty final response asked for (the
    tritonclient aio API cannot ask for it, hence the protobuf types)."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name="router", id=f"soak-{rec.index}")
    for name, value, dtype in (
            ("input_ids", np.array([ids], dtype=np.int32), "INT32"),
            ("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
            ("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
            ("end_id", np.array([[-1]], dtype=np.int32), "INT32"),  # no EOS: exact length
            ("streaming", np.array([[True]]), "BOOL")):
        tensor = req.inputs.add(name=name, datatype=dtype)
        tensor.shape.extend(value.shape)
        req.raw_input_contents.append(value.tobytes())
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


TARGETS = ("router", "ensemble/stream", "ensemble/unary", "ensemble_aggregated/stream",
           "ensemble_aggregated/unary")


def _text_request(rec: Record, text: str, max_tokens: int):
    """A request in NVIDIA's ensemble text I/O for ``rec.target``."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    model, mode = rec.target.split("/")
    req = service_pb2.ModelInferRequest(model_name=model, id=f"soak-{rec.index}")
    for name, value, dtype in (
            ("text_input", np.array([[text.encode()]], dtype=object), "BYTES"),
            ("max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
            ("stream", np.array([[mode == "stream"]]), "BOOL"),
            ("exclude_input_in_output", np.array([[True]]), "BOOL")):
        tensor = req.inputs.add(name=name, datatype=dtype)
        tensor.shape.extend(value.shape)
        if dtype == "BYTES":  # one object holding the length-prefixed elements
            raw = serialize_byte_tensor(value).reshape(-1)[0]
        else:
            raw = value.tobytes()
        req.raw_input_contents.append(raw)
    req.parameters["triton_enable_empty_final_response"].bool_param = True
    return req


async def run_request(stub, rec: Record, ids: list[int], max_tokens: int, t0: float,
                      timeout_s: float) -> None:
    done = asyncio.Event()

    async def requests():
        if rec.target == "router":
            yield _request(rec, ids, max_tokens)
        else:  # the prompt's ids as words: any text the tokenizer takes
            yield _text_request(rec, " ".join(f"w{t}" for t in ids[:24]), max_tokens)
        await done.wait()  # half-close only after the final response

    call = stub.ModelStreamInfer(requests())
    try:
        async with asyncio.timeout(timeout_s):
            async for response in call:
                if response.error_message:
                    rec.error = response.error_message
                    return
                out = response.infer_response
                names = [o.name for o in out.outputs]
                if "output_ids" in names:
                    raw = out.raw_output_contents[names.index("output_ids")]
                    rec.tokens += np.frombuffer(raw, dtype=np.int32).tolist()
                    rec.times_s.append(time.monotonic() - t0)
                elif "text_output" in names:
                    rec.times_s.append(time.monotonic() - t0)
                if out.parameters["triton_final_response"].bool_param:
                    rec.final = True
                    return
                if rec.cancel_after is not None and len(rec.tokens) >= rec.cancel_after:
                    rec.cancelled = True
                    call.cancel()
                    return
    except TimeoutError:
        rec.error = f"no final response after {timeout_s:g} s"
        call.cancel()
    except Exception as exc:  # the stream broke: recorded, not raised
        rec.error = rec.error or f"{type(exc).__name__}: {exc}"
    finally:
        done.set()


# -- samples and kills ---------------------------------------------------------------------------
def _proc_stats(pid: int) -> dict | None:
    """RSS, threads and open sockets of a process; None for one that has ended (a zombie)."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next((int(line.split()[1]) for line in status.splitlines()
                if line.startswith("VmRSS")), None)
    if rss is None:
        return None
    threads = next(int(line.split()[1]) for line in status.splitlines()
                   if line.startswith("Threads"))
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            sockets += os.readlink(fd).startswith("socket:")
        except OSError:
            pass
    return {"rss_mib": round(rss / 1024, 1), "threads": threads, "sockets": sockets}


def sample(fleet: Fleet, t0: float) -> dict:
    """The front server's process, every stub's, and the fleet's shared memory and KV."""
    fleet.watch()
    out = {"t_s": round(time.monotonic() - t0, 1), "server": _proc_stats(fleet.front.pid),
           "client": _proc_stats(os.getpid()), "kv_held": 0.0, "active_sequences": 0.0}
    regions = []
    for server in fleet.servers:
        for pid in _children(server.pid):
            name = next((a for a in _cmdline(pid).split() if a.endswith("_0_0")), str(pid))
            try:
                if (stats := _proc_stats(pid)) is not None:  # a killed stub: a zombie a while
                    out[name.removesuffix("_0_0")] = stats
            except OSError:  # a stub that just died
                pass
        regions += list(Path("/dev/shm").glob(f"{_shm_prefix(server.pid)}*"))
        metrics = server.info["endpoints"]["metrics"]
        out["kv_held"] += _metric(metrics, "pdtrt_kv_held_buffers")
        out["active_sequences"] += _metric(metrics, "pdtrt_engine_active_sequences")
    sizes = [_size(p) for p in regions]
    out["shm"] = {"files": sum(n is not None for n in sizes),
                  "mib": round(sum(n or 0 for n in sizes) / 2**20, 1)}
    return out


def _size(path: Path) -> int | None:
    """A region's size; None: it went between the listing and now."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


# Sampling and killing run on plain threads: asyncio.to_thread next to grpc.aio's poller
# stalled the event loop here (a finished worker's result never woke it).
def sampler(fleet: Fleet, t0: float, every_s: float, stop: threading.Event,
            samples: list[dict]) -> None:
    next_s = 0.0
    while not stop.is_set():
        if time.monotonic() - t0 >= next_s:
            next_s += every_s
            try:
                samples.append(sample(fleet, t0))
            except Exception as exc:  # a sample is a measurement, not a reason to stop
                samples.append({"t_s": round(time.monotonic() - t0, 1), "error": repr(exc)})
        fleet.watch()  # short-lived stubs too: a kernel-log fault is attributed by its pid
        stop.wait(1.0)


def pool_models(spec: Path) -> tuple[str, ...]:
    """Every phase model of ``spec``'s prefill and decode pools (models of this server)."""
    from pdtrt.enums import Phase
    from pdtrt.spec.load import load_spec

    loaded = load_spec(spec)
    return tuple(e.model for phase in (Phase.PREFILL, Phase.DECODE)
                 for e in loaded.pool_endpoints(phase) if not e.url)


def killer(fleet: Fleet, t0: float, every_s: float, until_s: float, stop: threading.Event,
           kills: list[dict], victims: tuple[str, ...] | None = None,
           rng: np.random.Generator | None = None) -> None:
    """Kill prefill and decode in turn every ``every_s`` until ``until_s`` (the arrivals' end:
    the requests still queued after it finish without kills); with ``victims`` (pools), one of
    them drawn by ``rng`` each time instead."""
    turn = 0
    while not stop.wait(every_s) and time.monotonic() - t0 < until_s:
        if victims and rng is not None:
            phase = victims[int(rng.integers(len(victims)))]
        else:
            phase = PHASES[turn % 2]
        turn += 1
        server = fleet.host(phase)
        pid = server.stub(phase)
        if pid is None:
            kills.append({"t_s": round(time.monotonic() - t0, 1), "phase": phase,
                          "skipped": "no process"})
            continue
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        kill = {"t_s": round(killed - t0, 1), "phase": phase, "pid": pid}
        kills.append(kill)
        stop.wait(1.5)  # the supervisor needs two rounds to see it gone
        while not (_ready(fleet.front.info["endpoints"]["http"])
                   and server.stub(phase) is not None):
            if time.monotonic() - killed > 300 or stop.wait(0.5):
                break
        else:
            kill["ready_again_s"] = round(time.monotonic() - killed, 1)
        kill["reloaded_pid"] = server.stub(phase)


# -- the run -------------------------------------------------------------------------------------
def schedule(args: argparse.Namespace, rng: np.random.Generator) -> list[Record]:
    starts = [0.0] * args.burst
    t = 0.0
    while args.rate > 0:
        t += float(rng.exponential(1 / args.rate))
        if t >= args.duration_s:
            break
        starts.append(t + (1.0 if args.burst else 0.0))
    recs = []
    for i, start in enumerate(starts):
        target = TARGETS[int(rng.integers(len(TARGETS)))] if args.mix else "router"
        cancel = (int(rng.integers(1, args.max_tokens))
                  if rng.random() < args.cancel_share and target == "router" else None)
        recs.append(Record(index=i, start_s=start, prompt=int(rng.integers(args.prompts)),
                           cancel_after=cancel, target=target))
    return recs


async def soak(args: argparse.Namespace, fleet: Fleet,
               prompts: list[tuple[list[int], list[int]]], recs: list[Record]) -> dict:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    server = fleet.front
    channel = grpc.aio.insecure_channel(server.info["endpoints"]["grpc"])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    metrics = server.info["endpoints"]["metrics"]
    counters = ("pdtrt_router_retries_total", "pdtrt_router_fallbacks_total",
                "pdtrt_router_migrations_total", "pdtrt_router_errors_total",
                "pdtrt_router_cancelled_total")
    before = {name: _metric(metrics, name) for name in counters}
    samples: list[dict] = []
    kills: list[dict] = []
    stop = threading.Event()
    slots = asyncio.Semaphore(max(args.streams, args.burst))
    t0 = time.monotonic()
    background = [threading.Thread(target=sampler, daemon=True,
                                   args=(fleet, t0, args.sample_every_s, stop, samples))]
    if args.kill_every_s > 0:
        victims = pool_models(args.spec) if args.pools else None
        background.append(threading.Thread(
            target=killer, daemon=True,
            args=(fleet, t0, args.kill_every_s, args.duration_s + (1.0 if args.burst else 0.0),
                  stop, kills, victims, np.random.default_rng(args.seed + 1))))
    for thread in background:
        thread.start()

    async def one(rec: Record) -> None:
        await asyncio.sleep(max(0.0, rec.start_s - (time.monotonic() - t0)))
        async with slots:
            rec.start_s = time.monotonic() - t0  # when it was sent
            ids, _expected = prompts[rec.prompt]
            await run_request(stub, rec, ids, args.max_tokens, t0, args.timeout_s)

    # A watchdog over the client itself: a request whose stream neither ends nor honours its
    # timeout's cancellation is recorded as a hang, not waited for.
    last_start = max((r.start_s for r in recs), default=0.0)
    backlog_s = len(recs) / max(args.streams, 1) * args.timeout_s
    tasks = [asyncio.ensure_future(one(r)) for r in recs]
    _done, pending = await asyncio.wait(
        tasks, timeout=last_start + min(backlog_s, 3 * args.timeout_s) + args.timeout_s + 60)
    for task, rec in zip(tasks, recs, strict=True):
        if task in pending:
            rec.error = rec.error or "client hang: no end at the watchdog's deadline"
            task.cancel()
    stop.set()
    for thread in background:
        thread.join(60)
    samples.append(sample(fleet, t0))
    await channel.close()
    after = {name: _metric(metrics, name) for name in counters}
    return {"elapsed_s": round(time.monotonic() - t0, 1), "samples": samples, "kills": kills,
            "router": {name: after[name] - before[name] for name in counters}}


def check(rec: Record, expected: list[int]) -> dict:
    """Tokens lost, duplicated or changed against the greedy oracle (router requests)."""
    if rec.target != "router":
        return {"changed": 0, "duplicated": 0, "lost": 0}
    got = rec.tokens
    changed = sum(a != b for a, b in zip(got, expected, strict=False))
    complete = rec.final and rec.error is None
    return {"changed": changed, "duplicated": max(0, len(got) - len(expected)),
            "lost": max(0, len(expected) - len(got)) if complete else 0}


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000, 1) if values else None


def summarize(args: argparse.Namespace, recs: list[Record],
              prompts: list[tuple[list[int], list[int]]], run: dict) -> dict:
    checks = [check(r, prompts[r.prompt][1]) for r in recs]
    ok = [r for r in recs if r.final and r.error is None]
    windows = []
    end = max([r.times_s[-1] for r in recs if r.times_s] + [0.0])
    for lo in np.arange(0, end + args.window_s, args.window_s):
        ws = [r for r in recs if lo <= r.start_s < lo + args.window_s]
        ttft = [r.times_s[0] - r.start_s for r in ws if r.times_s]
        itl = [b - a for r in ws for a, b in zip(r.times_s, r.times_s[1:], strict=False)]
        if ws:
            windows.append({"from_s": float(lo), "requests": len(ws),
                            "ok": sum(r.final and r.error is None for r in ws),
                            "failed": sum(r.error is not None and not r.cancelled for r in ws),
                            "ttft_p50_ms": _pct(ttft, 50), "ttft_p99_ms": _pct(ttft, 99),
                            "itl_p50_ms": _pct(itl, 50), "itl_p99_ms": _pct(itl, 99)})
    return {
        "args": vars(args) | {"spec": str(args.spec), "out": str(args.out)},
        "requests": len(recs), "ok": len(ok),
        "failed": sum(r.error is not None and not r.cancelled for r in recs),
        "cancelled": sum(r.cancelled for r in recs),
        "by_target": {t: {"requests": sum(r.target == t for r in recs),
                          "ok": sum(r.target == t for r in ok),
                          "failed": sum(r.target == t and r.error is not None
                                        and not r.cancelled for r in recs)}
                      for t in sorted({r.target for r in recs})},
        "completed_exact": sum(r.tokens == prompts[r.prompt][1] for r in ok
                               if r.target == "router"),
        "tokens_received": sum(len(r.tokens) for r in recs),
        "tokens_lost_completed": sum(c["lost"] for c in checks),
        "tokens_duplicated": sum(c["duplicated"] for c in checks),
        "tokens_changed": sum(c["changed"] for c in checks),
        "errors": sorted({(r.error or "")[:600] for r in recs if r.error and not r.cancelled}),
        "failures": [{"request_id": f"soak-{r.index}", "start_s": round(r.start_s, 2),
                      "last_token_s": round(r.times_s[-1], 2) if r.times_s else None,
                      "tokens": len(r.tokens), "error": r.error}
                     for r in recs if r.error is not None and not r.cancelled],
        **run, "windows": windows,
        "records": [asdict(r) for r in recs] if args.keep_records else [],
    }


def markdown(result: dict) -> str:
    a = result["args"]
    lines = [f"# Soak: {result['requests']} requests, {a['duration_s']} s at {a['rate']}/s, "
             f"burst {a['burst']}, kills every {a['kill_every_s']} s, "
             f"cancel share {a['cancel_share']}, seed {a['seed']}", "",
             "| requests | ok (exact) | failed | cancelled | router retries | fallbacks | "
             "migrations | tokens lost / duplicated / changed | elapsed s |", "|" + "---|" * 9,
             f"| {result['requests']} | {result['ok']} ({result['completed_exact']}) | "
             f"{result['failed']} | {result['cancelled']} | "
             f"{result['router']['pdtrt_router_retries_total']:g} | "
             f"{result['router']['pdtrt_router_fallbacks_total']:g} | "
             f"{result['router'].get('pdtrt_router_migrations_total', 0):g} | "
             f"{result['tokens_lost_completed']} / {result['tokens_duplicated']} / "
             f"{result['tokens_changed']} | {result['elapsed_s']} |", "",
             "| window from s | requests | ok | failed | TTFT p50 / p99 ms | ITL p50 / p99 ms |",
             "|" + "---|" * 6]
    lines += [f"| {w['from_s']:g} | {w['requests']} | {w['ok']} | {w['failed']} | "
              f"{w['ttft_p50_ms']} / {w['ttft_p99_ms']} | {w['itl_p50_ms']} / "
              f"{w['itl_p99_ms']} |" for w in result["windows"]]
    lines += ["", "| t s | server RSS MiB / threads / sockets | stubs RSS MiB (prefill, decode,"
              " router) | client sockets | KV held | /dev/shm files (MiB) |", "|" + "---|" * 6]
    for s in result["samples"]:
        if "error" in s:
            lines.append(f"| {s['t_s']} | sample failed: {s['error']} | | | | |")
            continue
        rss = ", ".join(str(s.get(m, {}).get("rss_mib", "-")) for m in (*PHASES, "router"))
        lines.append(f"| {s['t_s']} | {s['server']['rss_mib']} / {s['server']['threads']} / "
                     f"{s['server']['sockets']} | {rss} | {s['client']['sockets']} | "
                     f"{s['kv_held']:g} | {s['shm']['files']} ({s['shm']['mib']}) |")
    if result["kills"]:
        lines += ["", "| kill at s | phase model | ready again after s |", "|---|---|---|"]
        lines += [f"| {k['t_s']} | {k['phase']} | {k.get('ready_again_s', k.get('skipped'))} |"
                  for k in result["kills"]]
    if len(result.get("by_target", {})) > 1:
        lines += ["", "| target | requests | ok | failed |", "|---|---|---|---|"]
        lines += [f"| {t} | {v['requests']} | {v['ok']} | {v['failed']} |"
                  for t, v in result["by_target"].items()]
    lines += ["", f"stub deaths beyond the kills: {result['unexplained_stub_deaths']}; new "
              f"kernel-log faults of Triton processes: {result['kernel_faults']}"]
    lines += ["", f"stop: {result['stop']}", "", "errors: " + "; ".join(result["errors"][:8])]
    return "\n".join(lines) + "\n"


def verdict(result: dict) -> list[str]:
    """Why the soak failed (empty: it passed)."""
    why = []
    if result["unexplained_stub_deaths"]:
        why.append(f"{result['unexplained_stub_deaths']} stub(s) died that were not killed")
    if result["kernel_faults"]:
        why.append(f"{len(result['kernel_faults'])} Triton fault(s) in the kernel log")
    if result["failed"] and (result["args"]["pools"] or not result["args"]["kill_every_s"]):
        why.append(f"{result['failed']} request(s) failed "
                   + ("(pools: a kill must cost no request)" if result["args"]["pools"]
                      else "without a kill"))
    if result["tokens_lost_completed"] or result["tokens_duplicated"] or result["tokens_changed"]:
        why.append("tokens lost, duplicated or changed")
    return why


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", type=Path, default=None,
                   help="default: docs/examples/reference-cpu.yaml (with --pools: "
                        "reference-cpu-pools.yaml)")
    p.add_argument("--duration-s", type=float, default=1800)
    p.add_argument("--rate", type=float, default=2.0, help="arrivals per second (Poisson)")
    p.add_argument("--streams", type=int, default=64, help="most requests in flight")
    p.add_argument("--burst", type=int, default=0, help="requests sent at once first")
    p.add_argument("--kill-every-s", type=float, default=180, help="0: no kills")
    p.add_argument("--cancel-share", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--prompts", type=int, default=32, help="distinct prompts")
    p.add_argument("--timeout-s", type=float, default=300, help="per request")
    p.add_argument("--window-s", type=float, default=60)
    p.add_argument("--sample-every-s", type=float, default=30)
    p.add_argument("--keep-records", action="store_true", help="every request in the JSON")
    p.add_argument("--mix", action="store_true",
                   help="router streams and both ensembles, streaming and not")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/soak")
    p.add_argument("--pools", action="store_true",
                   help="serve pools; each kill hits one endpoint at random; no request may "
                        "fail")
    p.add_argument("--layout", choices=("one", "servers"), default="one",
                   help="servers (with --pools): each pool endpoint in a Triton server of its "
                        "own, the router in a front server")
    args = p.parse_args()
    if args.layout == "servers" and not args.pools:
        p.error("--layout servers needs --pools (it splits the pools' endpoints)")
    if args.spec is None:
        args.spec = ROOT / "docs/examples" / ("reference-cpu-pools.yaml" if args.pools
                                              else "reference-cpu.yaml")
    rng = np.random.default_rng(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="pdtrt-soak-"))
    faults_before = _triton_faults()
    fleet = start_fleet(args, workdir)
    fleet.watch()
    stop: dict = {}
    try:
        prefill_host = fleet.host(pool_models(args.spec)[0])  # its repository names the engine
        prompts = make_prompts(Path(prefill_host.info["repository"]), args.prompts,
                               args.max_tokens, rng)
        recs = schedule(args, rng)
        run = asyncio.run(soak(args, fleet, prompts, recs))
    finally:
        stop = stop_fleet(fleet)
    faults_after = _triton_faults()
    deaths = stub_deaths(fleet)
    killed = sum("pid" in k for k in run.get("kills", []))
    result = summarize(args, recs, prompts, run | {
        "stop": stop, "workdir": str(workdir), "stub_deaths": deaths,
        "unexplained_stub_deaths": max(0, len(deaths) - killed),
        "kernel_faults": None if faults_before is None or faults_after is None
        else sorted(ln for ln in faults_after - faults_before
                     if any(f"[{pid}]" in ln for pid in fleet.pids))})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "soak.md").write_text(markdown(result))
    print(markdown(result))
    if why := verdict(result):
        print("SOAK FAILED: " + "; ".join(why), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
