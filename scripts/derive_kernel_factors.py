#!/usr/bin/env python3
"""Derive pdtrt's per-GPU, per-dtype kernel efficiencies from the measured kernel tables.

    .venv/bin/python scripts/derive_kernel_factors.py      # -> pdtrt/data/kernel_factors.json
    .venv/bin/python scripts/derive_kernel_factors.py --kernels DIR -o out.json

Reads ``../shared/data/kernels/<gpu>/*.csv.gz`` (per-kernel TensorRT-LLM times from NVIDIA
aiconfigurator-core 0.12.0; see that folder's README) and writes the derived curves with the
sha256 of every table read. Deterministic: re-running it on the same tables reproduces the
shipped file (tests/perf/test_kernel_factors.py checks this). The method is documented in
``pdtrt/perf/kernel_derive.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.facts.catalog import load_catalog  # noqa: E402
from pdtrt.perf.kernel_derive import derive, dump_json  # noqa: E402
from pdtrt.yamlio import write_atomic  # noqa: E402

KERNELS = ROOT.parent / "shared" / "data" / "kernels"
OUTPUT = ROOT / "pdtrt" / "data" / "kernel_factors.json"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=Path, default=KERNELS, help="folder of per-GPU tables")
    ap.add_argument("-o", "--output", type=Path, default=OUTPUT)
    args = ap.parse_args()
    if not args.kernels.is_dir():
        print(f"error: no kernel tables at {args.kernels}", file=sys.stderr)
        return 2
    data = derive(args.kernels, load_catalog())
    write_atomic(args.output, dump_json(data) + "\n")
    print(f"wrote {args.output} ({len(data['gpus'])} GPUs: {', '.join(data['gpus'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
