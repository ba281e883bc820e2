"""CPU an idle CPU reference deployment uses, per process (tritonserver and each model's stub).

    .venv/bin/python benchmarks/idle_cpu.py [--seconds 10]

Starts the reference deployment (`docs/examples/reference-cpu.yaml`, both paths) in the
embedded Triton, waits until it is ready and settled, then reads user + system CPU time of every
process in the server's process group from /proc over ``--seconds`` with no request in flight.
Prints JSON: CPU-seconds per process and in total for the window. An idle server should use
next to nothing; before 2026-12-03 each UCX node (prefill, decode) busy-polled a core.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def group_cpu_s(pgid: int) -> dict[str, float]:
    """CPU seconds so far of each process in ``pgid``, keyed by model name (or the server)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_text().split("\0")
        except OSError:
            continue
        if int(fields[2]) != pgid:
            continue
        model = next((a.split("/repo/")[1].split("/")[0] for a in argv
                      if "/repo/" in a and a.endswith("model.py")), "tritonserver")
        out[model] = out.get(model, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=5.0, help="wait after ready, seconds")
    args = ap.parse_args()
    from _reference import start_reference_server

    server = start_reference_server("pdtrt-bench-idle-")
    try:
        pgid = server._proc.pid  # noqa: SLF001 -- the server leads its own process group
        time.sleep(args.settle)
        before = group_cpu_s(pgid)
        time.sleep(args.seconds)
        after = group_cpu_s(pgid)
    finally:
        server.stop()
    used = {k: round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items())}
    print(json.dumps({"seconds": args.seconds, "cpu_s": used,
                      "total_cpu_s": round(sum(used.values()), 3)}, indent=2))


if __name__ == "__main__":
    main()
