"""Every script in benchmarks/ runs: a seconds-long smoke run of each at its smallest settings.

The numbers a benchmark prints are reported in its .md file, never asserted here; a smoke run
asserts only that the script finishes (exit 0, within its time limit) and prints the shape of
result it documents, so a benchmark that rots (an API it calls changed, a subprocess it waits
for died) fails here instead of waiting to be noticed. ``SMOKE`` names every script; helper
modules and the Python-backend models the benchmarks install into a Triton repository are run
by the script named in ``RUN_BY``. A new script without a line in either fails
:func:`test_every_script_has_a_smoke_run`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "benchmarks"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]  # after the script; "{tmp}" becomes the test's temp directory
    expect: str  # a regex the combined output must contain
    triton: bool = False  # starts the embedded Triton server (slow: 20-60 s here)
    timeout_s: float = 600  # a loaded 2-core machine: a server start alone can take minutes
    rc: int = 0  # the exit status it must end with


SMOKE: dict[str, Smoke] = {
    "engine_ttft.py": Smoke((), r"\| model \| GPU \| weights / KV \|"),
    "plan_sim_speed.py": Smoke(("--smoke",), r"\| plan seed scenario, 2 req/s"),
    "prefix_reuse.py": Smoke(
        ("--chats", "1", "--turns", "2", "--system", "16", "--user", "4", "--answer", "2",
         "--layers", "1", "--hidden", "64", "--tokens-per-block", "8"),
        r"answers identical: True"),
    "published_points.py": Smoke(("--only", "l40s", "--print"), r"mean absolute error"),
    "router_profile.py": Smoke(("{tmp}/raw.txt",), r"\| event loop \| 75 % \|"),
    "seed_crossover.py": Smoke(
        ("--num-requests", "20", "--rates", "1", "--plan-rates", "2", "--out", "{tmp}/sc.md",
         "--png", "{tmp}/sc.png"), r"Crossover: ", timeout_s=600),
    "splitwise.py": Smoke(
        ("--trace", "conversation", "--num-requests", "20", "--design", "Baseline-H100",
         "--print"), r"\| Baseline-H100 \| \d+ machines \|", timeout_s=600),
    "client_limit.py": Smoke(
        ("--delay-ms", "1", "--osl", "4", "--concurrency", "2", "--rates", "5", "--requests",
         "4"), r"\| closed \| 2 \| 4 \|", triton=True),
    "front_bench.py": Smoke(
        ("--concurrency", "1", "--requests-per-user", "1", "--prompt-words", "8",
         "--output-tokens", "4", "--rounds", "1"), r'"front"', triton=True),
    "idle_cpu.py": Smoke(("--seconds", "0.5", "--settle", "0"), r'"total_cpu_s"', triton=True),
    "kv_routing.py": Smoke(("--smoke",), r"\| kv_aware \| .* \| True \|", triton=True),
    "relay_floor.py": Smoke(
        ("--concurrency", "1", "--output-tokens", "4", "--duration-s", "0.5", "--rounds", "1"),
        r"\| 0 \| relay_min \|", triton=True),
    "relay_python.py": Smoke(
        ("--concurrency", "2", "--output-tokens", "4,8", "--tokens-per-cell", "64"),
        r"\| 8 \| [\d.]+ \| [\d.]+ \| [-+][\d.]+ \|"),
    "router_bench.py": Smoke(
        ("--concurrency", "1", "--rounds", "1", "--duration-s", "0.5", "--prompt-tokens", "8",
         "--output-tokens", "4", "--bls-instances", "1"), r"\| 1 \| naive_bls×1 \| \d+ \| 0 \|",
        triton=True),
    "router_capacity.py": Smoke(
        ("--concurrency", "1", "--output-tokens", "4", "--prompt-tokens", "8", "--duration-s",
         "0.5", "--stream-interval", "2"), r"tok/s", triton=True),
    "router_wedge.py": Smoke(("--transports", "bls", "--rounds", "1", "--stuck-s", "1",
                              "--json", "{tmp}/wedge.json"), r"", triton=True),
    "serve_overhead.py": Smoke(("--smoke",), r'"pdtrt_pull_ms"', triton=True),
    "soak.py": Smoke(
        ("--duration-s", "2", "--rate", "2", "--streams", "2", "--kill-every-s", "0",
         "--cancel-share", "0", "--max-tokens", "4", "--prompts", "2", "--window-s", "1",
         "--sample-every-s", "1", "--out", "{tmp}/soak"), r"requests", triton=True),
    "bench_loop.sh": Smoke(("1", "docs/examples/reference-cpu.yaml", "2"),
                           r"runs not clean: 0 of 1", triton=True),
    # genai-perf and aiperf are not installed here (and must not be downloaded by a test):
    # these run up to their check for it and must stop there with a clear message, exit 3
    # (tests/benchmarks/test_client_crosscheck.py runs client_crosscheck.py for real where
    # the clients' venvs exist)
    "genai_perf_crosscheck.sh": Smoke((), r"genai-perf is not installed", rc=3),
    "genai_perf_openai.sh": Smoke((), r"genai-perf is not installed", rc=3),
    "client_crosscheck.py": Smoke(("--clients", "aiperf,genai-perf"),
                                  r"aiperf is not installed", rc=3),
}

RUN_BY = {
    "_cheapest.py": "seed_crossover.py",  # and tests/benchmarks/test_cheapest.py
    "_reference.py": "serve_overhead.py",
    "genai_perf_env.sh": "genai_perf_crosscheck.sh",
    "aiperf_env.sh": "client_crosscheck.py",
    "_client_results.py": "client_crosscheck.py",  # and tests/benchmarks/test_client_crosscheck.py
    "fixed_rate_phase.py": "router_capacity.py",  # a Triton model the script installs
    "minimal_relay.py": "relay_floor.py",  # a Triton model the script installs
    "router_naive_bls.py": "router_bench.py",  # a Triton model the script installs
}

# scripts whose smoke run is a test of their own, which checks more than the output's shape
OWN_SMOKE_TEST = {
    "price_ratio_map.py": ("test_price_ratio_map.py",
                           "test_smoke_run_writes_the_map_with_the_seed_cell"),
}

# py-spy's raw format: one stack a line, frames from the thread down, then the sample count
RAW_PROFILE = """\
MainThread;run_forever (asyncio/base_events.py:600);_run_once (asyncio/base_events.py:1900) 3
Thread-1;read (pdtrt/runtime/router/phase_client.py:40) 1
"""


def test_every_script_has_a_smoke_run():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert scripts == set(SMOKE) | set(RUN_BY) | set(OWN_SMOKE_TEST)
    assert set(RUN_BY.values()) <= set(SMOKE)
    here = Path(__file__).parent
    for module, test in OWN_SMOKE_TEST.values():
        assert f"def {test}(" in (here / module).read_text(), (module, test)


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable,
            "PDTRT": str(BIN / "pdtrt"), "GP_VENV": str(tmp / "no-genai-perf"),
            "GP_INSTALL": "0", "AIPERF_VENV": str(tmp / "no-aiperf"), "AIPERF_INSTALL": "0",
            "MPLBACKEND": "Agg"}


def run_smoke(name: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    smoke = SMOKE[name]
    args = [a.replace("{tmp}", str(tmp)) for a in smoke.args]
    cmd = ["bash", str(BENCH / name)] if name.endswith(".sh") else [sys.executable,
                                                                     str(BENCH / name)]
    # a session of its own: a run past its time is stopped as a whole (SIGTERM first, so a
    # script's own cleanup -- bench_loop.sh's `pdtrt stop` -- still runs), never left behind
    proc = subprocess.Popen(cmd + args, cwd=ROOT, env=_env(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=smoke.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{name} ran past {smoke.timeout_s:g} s:\n{(out + err)[-4000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _params(triton: bool):
    marks = [pytest.mark.triton, pytest.mark.slow] if triton else [pytest.mark.slow]
    return [pytest.param(name, id=name, marks=marks)
            for name, smoke in SMOKE.items() if smoke.triton is triton]


def _check(name: str, tmp: Path) -> None:
    (tmp / "raw.txt").write_text(RAW_PROFILE)
    out = run_smoke(name, tmp)
    text = out.stdout + out.stderr
    assert out.returncode == SMOKE[name].rc, text[-4000:]
    assert re.search(SMOKE[name].expect, text), text[-4000:]


@pytest.mark.parametrize("name", _params(triton=False))
def test_smoke_without_a_server(name, tmp_path):
    if name == "engine_ttft.py" and not (ROOT.parent / "shared/data/kernels").is_dir():
        pytest.skip("needs the kernel tables in ../shared/data/kernels")
    _check(name, tmp_path)


@pytest.mark.parametrize("name", _params(triton=True))
def test_smoke_with_a_server(name, tmp_path):
    from pdtrt.facts.embedded_triton import find_embedded_triton

    if find_embedded_triton() is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton)")
    _check(name, tmp_path)
