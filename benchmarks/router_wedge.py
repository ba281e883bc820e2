"""Does the router's stub wedge? Rounds of 50 streams cancelled mid-prefill, BLS vs gRPC.

    .venv/bin/python benchmarks/router_wedge.py [--transports bls,grpc] [--rounds 150]
        [--stuck-s 6] [--json out.json]

Per transport (``router.phase_transport``): the CPU reference deployment
(``docs/examples/reference-cpu.yaml``) in the embedded Triton 2.51, started fresh and *not*
supervised (a wedged router stays wedged), then rounds of the pattern that hung CI in
``tests/serve/test_e2e.py``: 50 clients each stream one 201-token prompt to ``router``, and
0.2 s later all of them cancel (gRPC stream cancellation). A round passes when the router's
``pdtrt_router_requests_in_flight`` is back to 0 within ``--stuck-s``; the first round that
does not is the wedge. Then, when gdb is installed, the router stub's native stacks are read
and the lock cycle of docs/design/serve.md ("The BLS deadlock") is looked for in them: a reader in
``ResponseIterator::Next`` waiting for the GIL, the parent-to-stub thread in
``ResponseIterator::EnqueueResponse`` waiting for the iterator's mutex.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("UCX_TLS", "sm,tcp")
os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")

STREAMS = 50


def _router_stub(repository: Path) -> int | None:
    from supervised_server import stubs_of

    pids = stubs_of(repository, "router")
    return pids[0] if pids else None


def lock_cycle(pid: int) -> dict[str, int]:
    """Threads of stub ``pid`` in each place of the BLS lock cycle (gdb's native stacks)."""
    out = subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "set pagination off",
                          "-ex", "thread apply all bt 12"], capture_output=True, text=True,
                         timeout=120).stdout
    threads = re.split(r"\n(?=Thread \d+ )", out)[1:]

    def count(*needles: str) -> int:
        return sum(all(n in t for n in needles) for t in threads)

    return {"threads": len(threads),
            "next_waiting_for_gil": count("ResponseIterator::Next", "PyEval_RestoreThread"),
            "enqueue_waiting_for_iterator_mutex": count("ResponseIterator::EnqueueResponse",
                                                        "pthread_mutex_lock"),
            "gil_holder_waiting_for_map_mutex": count("GetResponseIterator",
                                                      "pthread_mutex_lock"),
            "cleanup_waiting_for_map_mutex": count("SendCleanupId", "pthread_mutex_lock")}


def run_transport(transport: str, rounds: int, stuck_s: float) -> dict:
    from e2e_client import cancel_mid_prefill, metric, wait_for

    from pdtrt.serve.launcher import prepare, server_config
    from pdtrt.serve.triton_server import TritonServer

    work = Path(tempfile.mkdtemp(prefix=f"pdtrt-wedge-{transport}-"))
    text = (ROOT / "docs/examples/reference-cpu.yaml").read_text()
    spec = work / "spec.yaml"
    spec.write_text(text.replace("\nrouter:\n", f"\nrouter:\n  phase_transport: {transport}\n", 1))
    prepared = prepare(spec, workdir=work, engines_root=work / "engines")
    server = TritonServer(server_config(prepared))
    endpoints = server.start(timeout_s=600)
    result: dict = {"transport": transport, "rounds_asked": rounds, "wedged_at_round": None}
    start = time.monotonic()
    try:
        for r in range(rounds):
            cancel_mid_prefill(endpoints.grpc_url, f"wedge-{r}", STREAMS)
            if not wait_for(lambda: metric(endpoints.metrics_url,
                                           "pdtrt_router_requests_in_flight") == 0, stuck_s):
                result["wedged_at_round"] = r
                result["in_flight"] = metric(endpoints.metrics_url,
                                             "pdtrt_router_requests_in_flight")
                pid = _router_stub(prepared.repository)
                if pid is not None and shutil.which("gdb"):
                    result["lock_cycle"] = lock_cycle(pid)
                break
            print(f"{transport}: round {r} clean", file=sys.stderr, flush=True)
        result["rounds_run"] = r + 1
        result["seconds"] = round(time.monotonic() - start, 1)
    finally:
        server.stop(grace_s=5)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transports", default="bls,grpc", type=lambda s: s.split(","))
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--stuck-s", type=float, default=6.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {"machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()},
              "runs": [run_transport(t, args.rounds, args.stuck_s) for t in args.transports]}
    report["machine"]["loadavg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
