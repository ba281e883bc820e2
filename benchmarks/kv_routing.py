"""KV-aware routing and conditional disaggregation on the reference deployment (issue 27).

    .venv/bin/python benchmarks/kv_routing.py                      # ~15 min on 2 cores
    .venv/bin/python benchmarks/kv_routing.py --json benchmarks/results/kv_routing-DATE.json
    .venv/bin/python benchmarks/kv_routing.py --variants least_load,kv_aware --chats 4
    .venv/bin/python benchmarks/kv_routing.py --smoke               # a check that it runs

A multi-turn chat trace -- ``--chats`` conversations of ``--turns`` turns, each starting with
the same ``--system``-token system prompt; a first turn adds ``--first`` user tokens, a later
turn either ``--short`` or ``--long`` ones (drawn per turn, seeded), each answer is
``--answer`` tokens, ``--think-s`` between an answer and the next turn -- is played by
``--users`` closed-loop users (one gRPC stream each; a user plays one chat after another),
against one Triton server per variant, each the reference deployment of a seeded Llama-shaped
model (``--layers`` x ``--hidden``, big enough that a prefill costs real CPU) with
``--prefills`` prefill and ``--decodes`` decode endpoints (``prefill``, ``prefill_b``, ...,
``decode``, ``decode_b``, ...: a model each, one instance each). Each engine model serves one
request of its own before the clock starts. Every turn sends the conversation so far as token
ids (the system prompt, the earlier turns and the answers the server gave) to the ``router``
model, greedy.

Variants (the spec edits of ``docs/examples/reference-cpu.yaml``):

- ``no_reuse``: block reuse off, ``least_load`` routing -- pdtrt before issue 27; its answers
  are the reference the others must equal token for token;
- ``round_robin`` / ``least_load`` / ``kv_aware``: block reuse on, ``router.routing`` so;
- ``kv_aware_conditional``: ``kv_aware`` and ``router.max_local_prefill_tokens`` =
  ``--local-below`` (a turn whose net-new prompt is that short is prefilled by the decode
  endpoint that holds its history);
- ``aggregated``: every request on the aggregated path (``aggregated_below_tokens`` above any
  prompt), ``--decodes`` aggregated endpoints (``aggregated``, ``aggregated_b``, ...), block
  reuse and ``kv_aware`` routing among them -- serving both phases on the same engines.

Per variant: TTFT p50/p90 of first turns, of later turns, of later short and later long turns
(client-side: send to the first token); output tokens/s over the run's wall time; the prompt
tokens the engines computed (``pdtrt_engine_prompt_tokens_total`` less
``pdtrt_engine_kv_reused_blocks_total`` x the block size, every engine model summed); the KV
bytes moved from prefill to decode (``pdtrt_kv_transfer_bytes_total``); the router's path
decisions by reason; and whether every answer equals ``no_reuse``'s. The script exits 1 when
an answer differs or a request failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

os.environ.setdefault("UCX_TLS", "sm,tcp")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")

VARIANTS = ("no_reuse", "round_robin", "least_load", "kv_aware", "kv_aware_conditional",
            "aggregated")

# --smoke: the smallest run (the flags given on the command line still win); a system prompt
# long enough that the limits it sets fit the example spec's workload (isl 128, osl 32)
SMOKE = {"variants": "kv_aware", "chats": 1, "turns": 2, "users": 1, "system": 96, "first": 8,
         "short": 4, "long": 8, "answer": 2, "think_s": 0.0, "local_below": 16, "prefills": 1,
         "decodes": 1, "layers": 1, "hidden": 64, "vocab": 512, "tokens_per_block": 8}


def endpoint_models(phase: str, n: int) -> list[str]:
    """``prefill``, ``prefill_b``, ``prefill_c``, ...: one model (one endpoint) each."""
    return [phase, *(f"{phase}_{chr(ord('a') + i)}" for i in range(1, n))]


# -- the trace ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Turn:
    chat: int
    number: int
    new: tuple[int, ...]  # the tokens this turn adds (turn 0: system prompt + first message)
    think_s: float
    long: bool


def make_trace(args: argparse.Namespace) -> list[list[Turn]]:
    rng = random.Random(args.seed)
    vocab = args.vocab

    def words(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(3, vocab) for _ in range(n))

    system = (1, *words(args.system - 1))
    chats = []
    for c in range(args.chats):
        turns = [Turn(c, 0, system + words(args.first), 0.0, True)]
        for k in range(1, args.turns):
            long = rng.random() < args.long_share
            turns.append(Turn(c, k, words(args.long if long else args.short),
                              rng.uniform(0.5, 1.5) * args.think_s, long))
        chats.append(turns)
    return chats


def write_trace(chats: list[list[Turn]], path: Path) -> None:
    """The trace as ``pdtrt bench`` reads one (conversation_id, turn, isl, osl, think_s)."""
    with path.open("w") as f:
        for chat in chats:
            for t in chat:
                f.write(json.dumps({"conversation_id": f"c{t.chat}", "turn": t.number,
                                    "isl": len(t.new), "think_s": round(t.think_s, 3)}) + "\n")


# -- the deployment ----------------------------------------------------------------------------
def model_config(args: argparse.Namespace, work: Path) -> Path:
    base = json.loads((ROOT / "pdtrt/data/models/pdtrt--tiny-llama.json").read_text())
    base.update(hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=4,
                vocab_size=args.vocab, max_position_embeddings=4096)
    path = work / "config.json"
    path.write_text(json.dumps(base, indent=2) + "\n")
    return path


def variant_spec(name: str, args: argparse.Namespace, config: Path, work: Path) -> Path:
    spec = yaml.safe_load((ROOT / "docs/examples/reference-cpu.yaml").read_text())
    spec["name"] = "kv-routing"
    spec["model"] = {"name": "bench/llama-kv-routing", "path": str(config), "dtype": "fp32",
                     "kv_cache_dtype": "fp32", "seed": 0}
    longest = args.system + args.first + (args.turns - 1) * (args.long + args.answer)
    counts = {"prefill": args.prefills, "decode": args.decodes}
    for phase in ("prefill", "decode"):
        spec[phase]["endpoints"] = [{"model": m} for m in endpoint_models(phase, counts[phase])]
        spec[phase]["engine"].update(
            max_batch_size=8, max_num_tokens=4096, max_input_len=longest + 64,
            max_seq_len=longest + 64 + args.answer, tokens_per_block=args.tokens_per_block,
            enable_block_reuse=name != "no_reuse")
    router = spec["router"]
    router["routing"] = {"no_reuse": "least_load", "round_robin": "round_robin",
                         "least_load": "least_load"}.get(name, "kv_aware")
    router["kv_events_interval_s"] = 0.1
    if name == "kv_aware_conditional":
        router["max_local_prefill_tokens"] = args.local_below
    if name == "aggregated":
        router["aggregated_below_tokens"] = longest + 64
        router["aggregated_endpoints"] = [{"model": m} for m in
                                          endpoint_models("aggregated", args.decodes)]
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def start(spec: Path, work: Path, engines: Path):
    from pdtrt.errors import ServerError
    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer

    prepared = prepare(spec, workdir=work, engines_root=engines)
    for attempt in (1, 2):
        server = TritonServer(server_config(prepared))
        try:
            server.start(timeout_s=900)
            return server
        except ServerError as exc:  # seen once in ~15 starts: exit 1, no model named
            tail = "\n".join(server.log_text().splitlines()[-20:])
            print(f"server start {attempt} failed: {exc}\n{tail}", flush=True)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def scrape(url: str) -> dict[str, float]:
    """Every pdtrt sample of the metrics endpoint: ``name{labels}`` -> value."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("pdtrt_"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in samples.items()
               if k.split("{", 1)[0] == name and all(w in k for w in want))


# -- the client --------------------------------------------------------------------------------
@dataclass
class Result:
    chat: int
    turn: int
    long: bool
    prompt_tokens: int
    ttft_s: float = float("nan")
    end_s: float = 0.0
    tokens: list[int] = field(default_factory=list)
    error: str | None = None


def _input(name: str, value: np.ndarray) -> Any:
    import tritonclient.grpc as g
    from tritonclient.utils import np_to_triton_dtype

    x = g.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
    x.set_data_from_numpy(value)
    return x


class User:
    """One closed-loop user: one gRPC stream to ``router``, one request at a time."""

    def __init__(self, url: str, timeout_s: float) -> None:
        import tritonclient.grpc as g

        self.timeout_s = timeout_s
        self.results: queue.Queue = queue.Queue()
        self.client = g.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result, error: self.results.put(
            (time.perf_counter(), result, error)))
        self.serial = 0

    def ask(self, prompt: list[int], answer: int, out: Result, model: str = "router") -> None:
        self.serial += 1
        inputs = [_input("input_ids", np.array([prompt], dtype=np.int32)),
                  _input("input_lengths", np.array([[len(prompt)]], dtype=np.int32)),
                  _input("request_output_len", np.array([[answer]], dtype=np.int32)),
                  _input("streaming", np.array([[True]])),
                  _input("exclude_input_in_output", np.array([[True]]))]
        sent = time.perf_counter()
        self.client.async_stream_infer(model, inputs, enable_empty_final_response=True,
                                       request_id=f"c{out.chat}t{out.turn}-{self.serial}")
        while True:
            try:
                now, result, error = self.results.get(timeout=self.timeout_s)
            except queue.Empty:
                out.error = f"no response in {self.timeout_s} s"
                return
            if error is not None:
                out.error = str(error)
                return
            ids = result.as_numpy("output_ids")
            if ids is not None and ids.size:
                if not out.tokens:
                    out.ttft_s = now - sent
                out.tokens += [int(t) for t in ids.reshape(-1)]
            if result.get_response().parameters["triton_final_response"].bool_param:
                out.end_s = now
                return

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


def play(url: str, chats: list[list[Turn]], users: int, answer: int,
         timeout_s: float) -> tuple[list[Result], float]:
    """Every chat played by ``users`` closed-loop users; the results and the wall time."""
    todo: queue.Queue = queue.Queue()
    for chat in chats:
        todo.put(chat)
    results: list[Result] = []
    lock = threading.Lock()

    def loop() -> None:
        user = User(url, timeout_s)
        try:
            while True:
                try:
                    chat = todo.get_nowait()
                except queue.Empty:
                    return
                history: list[int] = []
                for turn in chat:
                    time.sleep(turn.think_s)
                    prompt = history + list(turn.new)
                    res = Result(turn.chat, turn.number, turn.long, len(prompt))
                    user.ask(prompt, answer, res)
                    with lock:
                        results.append(res)
                    if res.error is not None:
                        break  # the history would be wrong
                    history = prompt + res.tokens
        finally:
            user.close()

    start_s = time.perf_counter()
    threads = [threading.Thread(target=loop) for _ in range(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start_s


# -- one variant -------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 1) if values else None


def summarize(results: list[Result], wall_s: float, before: dict[str, float],
              after: dict[str, float], tpb: int) -> dict[str, Any]:
    ok = [r for r in results if r.error is None]
    groups = {"first_turns": [r for r in ok if r.turn == 0],
              "later_turns": [r for r in ok if r.turn > 0],
              "later_short_turns": [r for r in ok if r.turn > 0 and not r.long],
              "later_long_turns": [r for r in ok if r.turn > 0 and r.long]}

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    prompt = delta("pdtrt_engine_prompt_tokens_total")
    reused = delta("pdtrt_engine_kv_reused_blocks_total")
    paths = {}
    for key in after:
        if key.startswith("pdtrt_router_prefill_path_total{"):
            labels = dict(part.split("=") for part in key[key.index("{") + 1:-1].split(","))
            label = f"{labels['path'].strip(chr(34))}/{labels['reason'].strip(chr(34))}"
            paths[label] = after[key] - before.get(key, 0.0)
    out_tokens = sum(len(r.tokens) for r in ok)
    return {
        "requests": len(results), "errors": len(results) - len(ok),
        "error_samples": [r.error for r in results if r.error][:3],
        **{f"ttft_{g}_ms": {"n": len(rs), "p50": _pct([r.ttft_s for r in rs], 50),
                            "p90": _pct([r.ttft_s for r in rs], 90)}
           for g, rs in groups.items()},
        "prompt_tokens_sent": sum(r.prompt_tokens for r in ok),
        "engine_prompt_tokens": prompt, "reused_blocks": reused,
        "prompt_tokens_computed": prompt - reused * tpb,
        "kv_bytes_moved": delta("pdtrt_kv_transfer_bytes_total"),
        "router_cached_tokens": {p: delta("pdtrt_router_kv_cached_tokens_total", phase=p)
                                 for p in ("prefill", "decode", "aggregated")},
        "paths": {k: v for k, v in paths.items() if v},
        "output_tokens": out_tokens, "wall_s": round(wall_s, 2),
        "output_tok_per_s": round(out_tokens / wall_s, 2),
    }


def engines(name: str, args: argparse.Namespace) -> list[str]:
    """The engine models variant ``name`` serves requests with."""
    if name == "aggregated":
        return endpoint_models("aggregated", args.decodes)
    return [*endpoint_models("prefill", args.prefills), *endpoint_models("decode", args.decodes)]


def run_variant(name: str, args: argparse.Namespace, chats: list[list[Turn]], config: Path,
                base: Path) -> tuple[dict[str, Any], dict[tuple[int, int], list[int]]]:
    work = base / name
    work.mkdir()
    spec = variant_spec(name, args, config, base)
    t0 = time.perf_counter()
    server = start(spec, work, base / "engines")
    started_s = time.perf_counter() - t0
    try:
        url, metrics_url = server.endpoints.grpc_url, server.endpoints.metrics_url
        # every engine model runs one request of its own first (lazy torch init, not timed),
        # a prompt that shares no block with the trace
        user = User(url, args.timeout_s)
        try:
            for model in engines(name, args):
                res = Result(-1, 0, False, args.first)
                user.ask([1, *range(3, 3 + args.first)], args.answer, res, model=model)
                if res.error is not None:
                    raise RuntimeError(f"warm-up of {model}: {res.error}")
        finally:
            user.close()
        time.sleep(1.0)  # the engines' counters reach the metrics port
        before = scrape(metrics_url)
        results, wall_s = play(url, chats, args.users, args.answer, args.timeout_s)
        time.sleep(1.5)
        after = scrape(metrics_url)
    finally:
        server.stop()
    summary = {"variant": name, "server_start_s": round(started_s, 1),
               **summarize(results, wall_s, before, after, args.tokens_per_block)}
    answers = {(r.chat, r.turn): r.tokens for r in results if r.error is None}
    return summary, answers


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| variant | TTFT p50 / p90 first turns | later turns | later short | "
             "later long | prompt tokens computed | KV bytes moved | out tok/s | paths | "
             "same answers |", "|---" * 10 + "|"]

    def ms(d: dict) -> str:
        return f"{d['p50']:.0f} / {d['p90']:.0f}" if d["p50"] is not None else "-"

    for r in rows:
        paths = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["paths"].items())) or "-"
        lines.append(
            f"| {r['variant']} | {ms(r['ttft_first_turns_ms'])} | {ms(r['ttft_later_turns_ms'])}"
            f" | {ms(r['ttft_later_short_turns_ms'])} | {ms(r['ttft_later_long_turns_ms'])} | "
            f"{r['prompt_tokens_computed']:,.0f} | {r['kv_bytes_moved'] / 2**20:.1f} MiB | "
            f"{r['output_tok_per_s']:.1f} | {paths} | {r.get('identical', '-')} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--chats", type=int, default=12)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--system", type=int, default=384, help="system prompt tokens")
    parser.add_argument("--first", type=int, default=64, help="first turn's user tokens")
    parser.add_argument("--short", type=int, default=24, help="a short later turn's tokens")
    parser.add_argument("--long", type=int, default=192, help="a long later turn's tokens")
    parser.add_argument("--long-share", type=float, default=0.2,
                        help="share of later turns that are long")
    parser.add_argument("--answer", type=int, default=16, help="tokens per answer")
    parser.add_argument("--think-s", type=float, default=0.3)
    parser.add_argument("--local-below", type=int, default=128,
                        help="router.max_local_prefill_tokens of kv_aware_conditional")
    parser.add_argument("--prefills", type=int, default=4, help="prefill endpoints")
    parser.add_argument("--decodes", type=int, default=2,
                        help="decode endpoints (and aggregated ones, for 'aggregated')")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--tokens-per-block", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--smoke", action="store_true",
                        help="a check that it runs: one server (kv_aware, no no_reuse "
                             "reference), one short chat on a one-layer model")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(**SMOKE)
        args = parser.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    if "no_reuse" in names:
        names.remove("no_reuse")
    if not args.smoke:
        names.insert(0, "no_reuse")  # the answers every other variant is checked against

    chats = make_trace(args)
    base = Path(tempfile.mkdtemp(prefix="pdtrt-kv-routing-"))
    write_trace(chats, base / "trace.jsonl")
    config = model_config(args, base)
    rows, reference, ok = [], None, True
    try:
        for name in names:
            print(f"== {name} (load average {os.getloadavg()[0]:.1f})", flush=True)
            summary, answers = run_variant(name, args, chats, config, base)
            if reference is None:
                reference = answers
            summary["identical"] = answers == reference
            ok = ok and summary["identical"] and summary["errors"] == 0
            rows.append(summary)
            print(json.dumps(summary, indent=1), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(render(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python "
                       f"{platform.python_version()}",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows}, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
