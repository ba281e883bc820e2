"""Cross-check ``pdtrt bench`` against the clients people use, on the same load, back to back.

- **aiperf** 0.13.0 (NVIDIA's benchmark, the one NVIDIA Dynamo uses) against pdtrt's OpenAI
  front: ``aiperf profile --endpoint-type completions --streaming`` (``--aiperf-endpoint chat``
  for the chat endpoint: its template adds tokens to every prompt), ``ignore_eos``, and
  ``--use-server-token-count`` (the front's ``usage``).
- **genai-perf** 0.0.16 against the ``ensemble`` model over gRPC (``--endpoint-type kserve
  --backend tensorrtllm``), ``end_id`` -1 (no end token).

Each pair is one ``pdtrt bench`` run (gRPC to ``ensemble``, ``--ignore-eos``) and, right after
it, one client run with the same prompt length in the deployment's tokens, output length,
closed-loop concurrency, request count, warm-up count and seed; the router's histograms are
scraped around each run for the server's token counts and TTFT. Results: ``crosscheck.json``
and ``crosscheck.md`` in ``--out`` (printed too); how to read them: ``_client_results.py`` and
docs/bench.md ("Agreement with aiperf and genai-perf").

The deployment: ``pdtrt serve SPEC --detach`` started here and stopped at the end (default the
real model, docs/examples/smollm2-cpu.yaml; built first when its engines are missing, which
downloads SmolLM2 once), or an existing one named by ``--grpc-url``, ``--openai-url``,
``--metrics-url`` and ``--tokenizer``. Each client lives in a venv of its own, installed on
first use by ``aiperf_env.sh`` / ``genai_perf_env.sh`` (``AIPERF_INSTALL=0`` / ``GP_INSTALL=0``:
exit 3 instead of installing).

Exit status: 0 when every run finished (the 10 % verdict is in the results, not the status);
1 when a client or ``pdtrt bench`` failed every request, a run's process failed or ran past
``--run-timeout``, or the server it started died; 3 when a client is not installed and may not
be. Every process it starts runs under a timeout, in a session of its own that is killed whole.

    benchmarks/client_crosscheck.py                              # both clients, 2 pairs each
    benchmarks/client_crosscheck.py --clients aiperf --pairs 1 --requests 8 --warmup 1
    benchmarks/client_crosscheck.py --server-cpus 0 --client-cpus 1   # clients on a core apart
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from _client_results import (  # noqa: E402 -- a script beside its helper, not a package
    ClientRun,
    Pair,
    markdown,
    read_pdtrt,
    read_profile_export,
    scrape_totals,
    server_counts,
    summary,
)

CLIENTS = ("aiperf", "genai-perf")
ENV_SCRIPTS = {"aiperf": ("aiperf_env.sh", "AIPERF_VENV"),
               "genai-perf": ("genai_perf_env.sh", "GP_VENV")}
NOT_INSTALLED = 3


class Failure(Exception):
    """A run failed in a way that makes the cross-check void (exit 1)."""


@dataclass(frozen=True, kw_only=True)
class Deployment:
    grpc_url: str
    openai_url: str  # http://HOST:PORT/v1
    metrics_url: str
    tokenizer: str
    state: Path | None = None  # pdtrt serve's state file, when this script started it
    server_pid: int | None = None


def _pdtrt() -> list[str]:
    """This tree's pdtrt CLI (PYTHONPATH=ROOT is set for it)."""
    return [sys.executable, "-m", "pdtrt.cli.main"]


def _env(**extra: str) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
            **extra}


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], *, log: Path, timeout_s: float, cwd: Path | None = None,
        env: dict[str, str] | None = None, cpus: frozenset[int] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``cmd`` with stdout and stderr kept in ``log`` (stdout also returned, and in ``stderr``
    the CPU seconds its process tree used), on ``cpus`` (its whole tree: children inherit the
    affinity; None: wherever this process may run); killed as a whole session after
    ``timeout_s`` (Failure)."""
    cpu_before_s = _children_cpu_s()
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env or _env(), stdout=subprocess.PIPE,
                                stderr=err, text=True, start_new_session=True, preexec_fn=pin)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise Failure(f"{Path(cmd[0]).name} {cmd[1] if len(cmd) > 1 else ''} ran past "
                          f"{timeout_s:g} s (log: {log})") from None
    log.write_text(log.read_text() + out)
    # the CPU of every process of its tree that was waited for (aiperf's services are)
    return subprocess.CompletedProcess(cmd, proc.returncode, out,
                                       f"{_children_cpu_s() - cpu_before_s:.3f}")


def client_venv(client: str, work: Path) -> Path | None:
    """The client's venv, installed by its env script unless that is forbidden (None)."""
    script, var = ENV_SCRIPTS[client]
    proc = subprocess.run(
        ["bash", "-c", f'set -e; source "$1"; echo "${var}"', "_", str(ROOT / "benchmarks" /
                                                                      script)],
        env=_env(ROOT=str(ROOT), PY=sys.executable, WORK=str(work)), capture_output=True,
        text=True, timeout=1800)
    if proc.returncode == NOT_INSTALLED:
        sys.stderr.write(proc.stderr)
        return None
    if proc.returncode != 0:
        raise Failure(f"installing {client} failed:\n{proc.stderr[-2000:]}")
    return Path(proc.stdout.split()[-1])


def scrape(dep: Deployment, keep: Path) -> dict[str, float]:
    """The router's totals now; the page's pdtrt_request_* lines are kept in ``keep``."""
    try:
        with urllib.request.urlopen(dep.metrics_url, timeout=10) as page:
            text = page.read().decode()
    except OSError as exc:
        raise Failure(f"cannot scrape {dep.metrics_url}: {exc} -- is the server down?") from None
    keep.write_text("".join(line + "\n" for line in text.splitlines()
                            if line.startswith("pdtrt_request_")))
    return scrape_totals(text)


def check_alive(dep: Deployment, after: str) -> None:
    """Fail when the server this script started died (or was restarted by its supervisor)."""
    if dep.state is None or dep.server_pid is None:
        return
    pid = json.loads(dep.state.read_text())["pid"]
    try:
        os.kill(dep.server_pid, 0)
    except ProcessLookupError:
        raise Failure(f"the Triton server (pid {dep.server_pid}) died during {after}") from None
    if pid != dep.server_pid:
        raise Failure(f"the Triton server was restarted during {after} (pid {dep.server_pid} "
                      f"-> {pid})")


def start_deployment(args: argparse.Namespace, work: Path) -> Deployment:
    if args.grpc_url:
        return Deployment(grpc_url=args.grpc_url, openai_url=args.openai_url.rstrip("/"),
                          metrics_url=args.metrics_url, tokenizer=args.tokenizer)
    out = run([*_pdtrt(), "serve", str(args.spec), "--detach", "--workdir", str(work / "serve"),
               "--engines-dir", str(args.engines_dir), "--json"], log=work / "serve.log",
              timeout_s=args.serve_timeout, cpus=args.server_cpus)
    if out.returncode != 0:
        raise Failure(f"pdtrt serve failed ({out.returncode}):\n"
                      + (work / "serve.log").read_text()[-2000:])
    served = json.loads(out.stdout)
    manifest = json.loads(Path(served["repository"], "pdtrt-repo.json").read_text())
    state = Path(served["state"])
    urls = served["endpoints"]
    return Deployment(grpc_url=urls["grpc"], openai_url=urls["openai"].rstrip("/"),
                      metrics_url=urls["metrics"], tokenizer=manifest["tokenizer_dir"],
                      state=state, server_pid=int(json.loads(state.read_text())["pid"]))


def stop_deployment(dep: Deployment, work: Path) -> None:
    if dep.state is not None:
        run([*_pdtrt(), "stop", str(work / "serve")], log=work / "stop.log", timeout_s=180)


def run_pdtrt(args: argparse.Namespace, dep: Deployment, out: Path, seed: int) -> ClientRun:
    before = scrape(dep, out.with_name("pdtrt-metrics-before.txt"))
    proc = run([*_pdtrt(), "bench", "--url", dep.grpc_url, "--model", "ensemble",
                "--concurrency", str(args.concurrency), "--requests", str(args.requests),
                "--warmup", str(args.warmup), "--isl", str(args.isl), "--osl", str(args.osl),
                "--ignore-eos", "--tokenizer", dep.tokenizer, "--seed", str(seed),
                "--no-plots", "--output-dir", str(out), "--json"],
               log=out.with_suffix(".log"), timeout_s=args.run_timeout, cpus=args.client_cpus)
    check_alive(dep, "pdtrt bench")
    if proc.returncode not in (0, 1):  # 1: some requests failed, the report is whole
        raise Failure(f"pdtrt bench failed ({proc.returncode}); log: {out.with_suffix('.log')}")
    after = scrape(dep, out.with_name("pdtrt-metrics-after.txt"))
    return replace(read_pdtrt(out / "report.json", server_counts(before, after)),
                   client_cpu_s=float(proc.stderr))


def _client_cmd(client: str, venv: Path, args: argparse.Namespace, dep: Deployment,
                artifacts: Path, seed: int, model: str) -> list[str]:
    load = ["--concurrency", str(args.concurrency), "--request-count", str(args.requests),
            "--warmup-request-count", str(args.warmup), "--random-seed", str(seed),
            "--tokenizer", dep.tokenizer, "--artifact-dir", str(artifacts), "--streaming"]
    lengths = ["--synthetic-input-tokens-mean", str(args.isl), "--synthetic-input-tokens-stddev",
               "0", "--output-tokens-mean", str(args.osl), "--output-tokens-stddev", "0"]
    if client == "aiperf":
        return [str(venv / "bin/aiperf"), "profile", "-m", model, "--endpoint-type",
                args.aiperf_endpoint, "-u", dep.openai_url.removesuffix("/v1"), *load, *lengths,
                "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
                "--use-legacy-max-tokens", "--ui-type", "none", "--no-server-metrics",
                "--workers-max", str(args.concurrency), "--record-processors", "1"]
    return [str(venv / "bin/genai-perf"), "profile", "-m", "ensemble", "--endpoint-type",
            "kserve", "--backend", "tensorrtllm", "-u", dep.grpc_url, *load, *lengths,
            # the JSON form: genai-perf 0.0.16 reads "end_id:-1" as the string "-1"
            # ("-1".isdigit() is False), which perf_analyzer cannot send as INT32
            "--extra-inputs", json.dumps({"end_id": -1})]


def run_client(client: str, venv: Path, args: argparse.Namespace, dep: Deployment, out: Path,
               seed: int, libs: Path) -> ClientRun:
    out.mkdir(parents=True)
    model = "ensemble"
    if client == "aiperf":
        with urllib.request.urlopen(f"{dep.openai_url}/models", timeout=10) as page:
            model = json.load(page)["data"][0]["id"]
    env = _env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
               LD_LIBRARY_PATH=str(libs))  # perf_analyzer's (genai_perf_env.sh)
    # The tokenizer is a local directory: no hub is asked. genai-perf is told so; aiperf
    # 0.13.0 must not be: with HF_HUB_OFFLINE it looks a local path up as a hub repo id in
    # the cache (Tokenizer._from_pretrained_local) and fails, while online it sees the path
    # is local (resolve_alias) and loads it with no request.
    if client == "genai-perf":
        env["HF_HUB_OFFLINE"] = "1"
    else:
        env.pop("HF_HUB_OFFLINE", None)
    before = scrape(dep, out / "metrics-before.txt")
    proc = run(_client_cmd(client, venv, args, dep, out / "artifacts", seed, model),
               log=out / f"{client}.log", timeout_s=args.run_timeout, cwd=out, env=env,
               cpus=args.client_cpus)
    check_alive(dep, client)
    counts = server_counts(before, scrape(dep, out / "metrics-after.txt"))
    name = "aiperf" if client == "aiperf" else "genai_perf"
    # aiperf also writes one per phase (phases/warmup/, phases/profiling/): the top one is
    # the measured requests' summary
    found = sorted(glob.glob(str(out / "**" / f"profile_export_{name}.json"), recursive=True),
                   key=lambda path: (path.count(os.sep), path))
    if proc.returncode != 0 or not found:
        log = (out / f"{client}.log").read_text()
        raise Failure(f"{client} failed ({proc.returncode}); log: {out / f'{client}.log'}\n"
                      + log[-2000:] + _known_cause(client, log))
    return replace(read_profile_export(Path(found[0]), client, num_sent=args.requests,
                                       server=counts), client_cpu_s=float(proc.stderr))


def _known_cause(client: str, log: str) -> str:
    if client == "genai-perf" and "Failed to parse JSON string" in log:
        return ("\nknown cause: perf_analyzer (tritonclient 2.51) exports a value for every "
                "output the model declares, also those a response does not carry, reading "
                "memory it does not own; a NaN among them cuts its JSON short. pdtrt's "
                "ensembles carry every output on every response since issue 46 -- is the "
                "repository older, or not pdtrt's? (docs/bench.md, 'Agreement with aiperf and "
                "genai-perf')")
    return ""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", default=",".join(CLIENTS),
                   help="comma-separated: aiperf, genai-perf (default both)")
    p.add_argument("--pairs", type=int, default=2, help="pdtrt bench + client pairs per client")
    p.add_argument("--isl", type=int, default=128, help="prompt tokens (deployment's tokenizer)")
    p.add_argument("--osl", type=int, default=32, help="output tokens (no end token)")
    p.add_argument("--concurrency", type=int, default=4, help="closed-loop users")
    p.add_argument("--requests", type=int, default=40, help="measured requests per run")
    p.add_argument("--warmup", type=int, default=4, help="warm-up requests per run")
    p.add_argument("--aiperf-endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--spec", type=Path, default=ROOT / "docs/examples/smollm2-cpu.yaml")
    p.add_argument("--engines-dir", type=Path, default=ROOT / "engines")
    p.add_argument("--grpc-url", help="an existing deployment instead of --spec: its gRPC "
                   "address (also --openai-url, --metrics-url, --tokenizer)")
    p.add_argument("--openai-url", help="its OpenAI front, http://HOST:PORT/v1")
    p.add_argument("--metrics-url", help="its Triton metrics, http://HOST:PORT/metrics")
    p.add_argument("--tokenizer", help="its tokenizer directory")
    p.add_argument("--out", type=Path, help="results folder (default: in the work folder)")
    p.add_argument("--server-cpus", type=_cpus, help="CPUs for the deployment this script "
                   "starts, e.g. 0 or 0-3 (default: all)")
    p.add_argument("--client-cpus", type=_cpus, help="CPUs for pdtrt bench and the other "
                   "client, e.g. 1 -- apart from the server's, so a client's own CPU is not "
                   "taken from the server (default: all)")
    p.add_argument("--run-timeout", type=float, default=600.0, help="seconds per run")
    p.add_argument("--serve-timeout", type=float, default=1200.0,
                   help="seconds for pdtrt serve (a first build downloads the model)")
    args = p.parse_args(argv)
    clients = tuple(c.strip() for c in args.clients.split(",") if c.strip())
    if not clients or set(clients) - set(CLIENTS):
        p.error(f"--clients: choose from {', '.join(CLIENTS)}")
    args.clients = clients
    if "genai-perf" in clients and 0 < args.warmup < args.concurrency:
        # measured: perf_analyzer 2.51 with 1 warm-up request at concurrency 2 never ends
        # its measurement (0, or as many as the users, end)
        p.error(f"--warmup {args.warmup} with --concurrency {args.concurrency}: genai-perf's "
                "perf_analyzer never finishes with fewer warm-up requests than users; give "
                f"--warmup 0 or at least {args.concurrency}")
    existing = (args.grpc_url, args.openai_url, args.metrics_url, args.tokenizer)
    if args.server_cpus and args.grpc_url:
        p.error("--server-cpus pins the deployment this script starts; with --grpc-url, pin "
                "yours where you start it")
    if args.server_cpus and args.client_cpus and args.server_cpus & args.client_cpus:
        p.error(f"--server-cpus and --client-cpus share CPU(s) "
                f"{_cpu_list(args.server_cpus & args.client_cpus)}: give them apart")
    if any(existing) and not all(existing):
        p.error("an existing deployment needs all of --grpc-url, --openai-url, --metrics-url "
                "and --tokenizer")
    return args


def _cpus(text: str) -> frozenset[int]:
    """``0,2`` or ``0-3`` -> the CPUs, each one this process may run on."""
    try:
        cpus = frozenset(n for part in text.split(",") for n in (
            range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1)))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give CPUs as 0,2 or 0-3") from None
    if not cpus or not cpus <= (allowed := os.sched_getaffinity(0)):
        raise argparse.ArgumentTypeError(f"{text!r}: CPUs this machine gives are "
                                         f"{_cpu_list(allowed)}")
    return cpus


def _cpu_list(cpus: Iterable[int]) -> str:
    return ",".join(str(n) for n in sorted(cpus))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="pdtrt-crosscheck-"))
    try:
        venvs = {client: client_venv(client, work) for client in args.clients}  # no server yet
    except Failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if None in venvs.values():
        shutil.rmtree(work)
        return NOT_INSTALLED
    out_dir = args.out or work / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {work}", file=sys.stderr)
    pairs: dict[str, list[Pair]] = {}
    dep = None
    try:
        dep = start_deployment(args, work)
        for client in args.clients:
            for i in range(args.pairs):
                pair_dir = work / client / f"pair{i + 1}"
                pair_dir.mkdir(parents=True)
                ours = run_pdtrt(args, dep, pair_dir / "pdtrt", seed=i)
                other = run_client(client, venvs[client], args, dep, pair_dir / "client", seed=i,
                                   libs=work / "libs")
                for r in (ours, other):
                    if r.num_ok == 0:
                        raise Failure(f"{r.client} failed every request (pair {i + 1})")
                pairs.setdefault(client, []).append(Pair(index=i + 1, pdtrt=ours, other=other))
                print(f"{client} pair {i + 1}: load average {os.getloadavg()[0]:.1f}",
                      file=sys.stderr)
    except Failure as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if dep is not None:
            stop_deployment(dep, work)
        write_results(args, pairs, out_dir)
    return 0


def write_results(args: argparse.Namespace, pairs: dict[str, list[Pair]], out_dir: Path) -> None:
    load = {k: getattr(args, k) for k in ("isl", "osl", "concurrency", "requests", "warmup",
                                          "aiperf_endpoint")}
    load |= {k: None if getattr(args, k) is None else _cpu_list(getattr(args, k))
             for k in ("server_cpus", "client_cpus")}
    data = {"load": {**load, "spec": str(args.spec) if not args.grpc_url else None},
            "written": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "clients": {client: summary(p) for client, p in pairs.items()}}
    (out_dir / "crosscheck.json").write_text(json.dumps(data, indent=2) + "\n")
    text = "".join(f"### {client}\n\n{markdown(p)}\n" for client, p in pairs.items())
    (out_dir / "crosscheck.md").write_text(text)
    print(text)
    print(f"results: {out_dir / 'crosscheck.json'}, {out_dir / 'crosscheck.md'}",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
