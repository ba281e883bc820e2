"""Where a stub's CPU goes, from ``py-spy record --format raw`` files (``router_bench.py
--py-spy DIR`` writes them): on-CPU samples per thread kind and per function, self and
inclusive, as a markdown table.

    .venv/bin/python benchmarks/router_profile.py DIR/router-c32-router0.txt [more files]

py-spy samples Python threads only (``--threads``; idle ones are left out), so CPU spent in
the stub's own C++ threads (the ones that receive BLS responses and the parent's messages) is
not in these samples; ``router_bench.py`` reports the whole process's CPU from /proc.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# frames every stack of a thread or task passes through (shown only where they spend time)
_PLUMBING = ("(threading.py)", "(base_events.py)", "(events.py)")


def load(path: Path) -> list[tuple[list[str], int]]:
    """(frames from the thread down, samples) per stack line."""
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            stack, count = line.rsplit(" ", 1)
            rows.append((stack.split(";"), int(count)))
    return rows


def thread_kind(frames: list[str]) -> str:
    """``event loop``, ``BLS reader`` or the first frame (the thread)."""
    text = ";".join(frames)
    if "run_forever" in text:
        return "event loop"
    if "bls_client.py" in text and "read (" in text:
        return "BLS reader threads"
    return frames[0][:40]


def _function(frame: str) -> str:
    """``name (path:line)`` -> ``name (file)``: lines of one function add up."""
    m = re.match(r"(.*) \((.*?):\d+\)$", frame)
    return f"{m.group(1)} ({Path(m.group(2)).name})" if m else frame


def summarize(path: Path, top: int) -> str:
    rows = load(path)
    total = sum(n for _, n in rows) or 1
    kinds: Counter[str] = Counter()
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for frames, n in rows:
        kinds[thread_kind(frames)] += n
        names = [_function(f) for f in frames[1:]]
        if names:
            own[names[-1]] += n
        for name in set(names):
            incl[name] += n
    out = [f"### {path.name}: {total} on-CPU samples", "",
           "| thread | share |", "|---|---|"]
    out += [f"| {k} | {100 * n / total:.0f} % |" for k, n in kinds.most_common(6)]
    out += ["", "| function | self | inclusive |", "|---|---|---|"]
    shown = [(name, n) for name, n in incl.most_common()
             if own[name] or not name.endswith(_PLUMBING)]
    for name, n in shown[:top]:
        out.append(f"| `{name}` | {100 * own[name] / total:.0f} % | {100 * n / total:.0f} % |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    for path in args.files:
        print(summarize(path, args.top))
        print()


if __name__ == "__main__":
    main()
