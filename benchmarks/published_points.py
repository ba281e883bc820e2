#!/usr/bin/env python3
"""Published TensorRT-LLM maximum-throughput points against ``pdtrt estimate``: a check, not a fit.

    .venv/bin/python benchmarks/published_points.py            # ~10 s; writes the results below
    .venv/bin/python benchmarks/published_points.py --only h100-sxm --print

Reads ``benchmarks/published/trtllm_perf_overview.yaml`` (NVIDIA's own throughput tables, each
point with its source, GPU, model, quantisation, TP, ISL/OSL, the engine limits of the run and
the published output tokens/s), runs pdtrt's performance model on every point the way
``trtllm-bench throughput`` runs it, and writes ``benchmarks/results/published_points.md``
(a table of predicted vs published, the error per point, the mean absolute error per group and
overall) and ``published_points.json`` beside it.

How a published point becomes an estimate. ``trtllm-bench throughput`` queues every request of
its data set at once (no delay between requests) and reports the output tokens of all of them
over the whole run; the engine runs as many as ``max_batch_size`` and the KV cache allow and
admits the next request when one ends. That is pdtrt's closed loop with more clients than
running slots: ``Load(concurrency=num_requests)``, each instance built with the run's
``max_batch_size``, ``max_num_tokens``, the KV-cache fraction the overview says it used (0.95)
and the guaranteed-no-evict capacity policy the tool reports. Nothing else is set per point; the
factors are the shipped ``trtllm`` ones (fitted on shared/data only). The published numbers are
never read by anything but this check.

The engine limits. The overview does not print ``max_batch_size`` / ``max_num_tokens`` per row:
``trtllm-bench`` chose them from the data set's ISL/OSL with its tuning heuristic
(``tensorrt_llm/bench/build/tuning.py``, read at commit 04cba882084a25665e7f80f5bda71b35b9790b6f).
:func:`trtllm_bench_limits` restates that rule so the data file's limits can be regenerated and
checked: KV requests = 0.95 x (GPU memory x GPUs - weights) / KV bytes of one ISL+OSL sequence,
capped at 4096 per pipeline stage; tokens = requests x (1 + ISL/OSL), capped at 32768; then both
rounded up to coarse steps (batch >= 64, tokens >= 2048).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pdtrt.enums import KVDType, ServingMode, WeightQuant  # noqa: E402
from pdtrt.facts.catalog import GPU, Catalog, load_catalog  # noqa: E402
from pdtrt.facts.model import ModelFacts, load_model_facts  # noqa: E402
from pdtrt.perf.estimate import Estimate, Load, ServingConfig, estimate  # noqa: E402
from pdtrt.perf.factors import EfficiencyFactors, load_factors  # noqa: E402
from pdtrt.perf.hardware import Instance  # noqa: E402

DATA = ROOT / "benchmarks" / "published" / "trtllm_perf_overview.yaml"
RESULTS = ROOT / "benchmarks" / "results"
KV_FRACTION = 0.95  # "we also use a higher KV cache percentage ... 0.95" (both overview versions)
QUANTS = {"fp8": (WeightQuant.FP8, KVDType.FP8), "bf16": (WeightQuant.NONE, KVDType.BF16)}
METRICS = ("output_tok_per_s", "output_tok_per_s_per_gpu")
SOURCE_KEYS = {"title", "repo", "path", "commit", "url", "trtllm_version", "runtime", "metric",
               "harness", "limits"}
POINT_KEYS = {"source", "model", "gpu", "tp", "quant", "isl", "osl", "num_requests",
              "max_batch_size", "max_num_tokens", "published"}


class DataError(ValueError):
    """The published-points file is not what this script expects (the message says where)."""


@dataclass(frozen=True, kw_only=True)
class Source:
    key: str
    title: str
    repo: str
    path: str
    commit: str
    url: str
    trtllm_version: str
    runtime: str
    metric: str
    harness: str
    limits: str


@dataclass(frozen=True, kw_only=True)
class PublishedPoint:
    source: Source
    model: str
    gpu: str
    tp: int
    quant: str
    isl: int
    osl: int
    num_requests: int
    max_batch_size: int
    max_num_tokens: int
    published: float  # in the source's metric

    @property
    def label(self) -> str:
        return (f"{self.model.split('/')[-1]} {self.gpu} TP{self.tp} {self.quant} "
                f"{self.isl}/{self.osl}")

    @property
    def published_tok_per_s(self) -> float:
        """Total output tokens/s of the run (per-GPU metrics times the GPUs)."""
        per_gpu = self.source.metric == "output_tok_per_s_per_gpu"
        return self.published * self.tp if per_gpu else self.published


def _require(entry: dict, keys: set[str], where: str) -> None:
    missing, extra = keys - entry.keys(), entry.keys() - keys
    if missing or extra:
        raise DataError(f"{where}: missing {sorted(missing)}, unknown {sorted(extra)}")


def _positive_int(entry: dict, key: str, where: str) -> int:
    value = entry[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DataError(f"{where}: {key} must be a positive integer, got {value!r}")
    return value


def load_points(path: Path = DATA) -> list[PublishedPoint]:
    """The points of ``path``, checked field by field; raises :class:`DataError`."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or set(raw) != {"sources", "points"}:
        raise DataError(f"{path}: expected exactly the keys 'sources' and 'points'")
    sources: dict[str, Source] = {}
    for key, entry in raw["sources"].items():
        _require(entry, SOURCE_KEYS, f"source {key}")
        if entry["metric"] not in METRICS:
            raise DataError(f"source {key}: metric must be one of {METRICS}")
        if len(str(entry["commit"])) != 40:
            raise DataError(f"source {key}: commit must be the full 40-hex-digit hash")
        sources[key] = Source(key=key, **{k: str(v) for k, v in entry.items()})
    points = []
    for n, entry in enumerate(raw["points"]):
        where = f"point {n}"
        _require(entry, POINT_KEYS, where)
        if entry["source"] not in sources:
            raise DataError(f"{where}: unknown source {entry['source']!r}")
        if entry["quant"] not in QUANTS:
            raise DataError(f"{where}: quant must be one of {sorted(QUANTS)}")
        published = entry["published"]
        if not isinstance(published, (int, float)) or published <= 0:
            raise DataError(f"{where}: published must be a positive number")
        ints = {k: _positive_int(entry, k, where)
                for k in ("tp", "isl", "osl", "num_requests", "max_batch_size",
                          "max_num_tokens")}
        points.append(PublishedPoint(source=sources[entry["source"]], model=str(entry["model"]),
                                     gpu=str(entry["gpu"]), quant=entry["quant"],
                                     published=float(published), **ints))
    return points


# (below this value, round up to a multiple of this step): trtllm-bench's coarse steps
BATCH_STEPS = ((256, 32), (1024, 128), (math.inf, 256))
TOKEN_STEPS = ((4096, 256), (8192, 512), (math.inf, 1024))


def _coarse(value: float, steps: tuple[tuple[float, int], ...]) -> int:
    step = next(s for bound, s in steps if value < bound)
    return step * math.ceil(value / step)


def trtllm_bench_limits(model: ModelFacts, gpu: GPU, *, tp: int, quant: str, isl: int,
                        osl: int, kv_fraction: float = KV_FRACTION) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) that trtllm-bench's tuning heuristic picks (module doc).

    GPU memory is the catalog's nominal capacity (trtllm-bench reads NVML's total, a few
    hundred MiB less on some cards); weights count every parameter at the quantised width."""
    gib = 1024 ** 3
    bytes_per_param = 1.0 if quant == "fp8" else 2.0
    kv_heads = max(tp, model.num_kv_heads)
    kv_gib_per_token = (2 * model.num_layers * kv_heads * model.head_dim * bytes_per_param
                        / gib)
    free_gib = gpu.memory_bytes / gib * tp - model.num_params * bytes_per_param / gib
    requests = kv_fraction * free_gib / (kv_gib_per_token * (isl + osl))
    batch = min(requests, 4096)
    tokens = min(batch * (1 + isl / osl), 32768)
    max_batch_size = max(64, _coarse(batch, BATCH_STEPS))
    max_num_tokens = max(2048, _coarse(tokens, TOKEN_STEPS))
    return max_batch_size, max_num_tokens


@dataclass(frozen=True, kw_only=True)
class Check:
    point: PublishedPoint
    estimate: Estimate

    @property
    def predicted_tok_per_s(self) -> float:
        return self.estimate.output_tok_per_s

    @property
    def error(self) -> float:
        """Signed relative error of the prediction (negative: pdtrt predicts less)."""
        return self.predicted_tok_per_s / self.point.published_tok_per_s - 1


def check_point(point: PublishedPoint, f: EfficiencyFactors, catalog: Catalog,
                models: dict[str, ModelFacts] | None = None) -> Check:
    """pdtrt's estimate of one published point (module doc: how the run is modelled)."""
    models = {} if models is None else models
    model = models.setdefault(point.model, load_model_facts(point.model))
    weights, kv = QUANTS[point.quant]
    inst = Instance(model=model, gpu=catalog.get(point.gpu), tp=point.tp, weights=weights,
                    kv_dtype=kv, max_batch_size=point.max_batch_size,
                    max_num_tokens=point.max_num_tokens, kv_cache_fraction=KV_FRACTION)
    config = ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst)
    load = Load(isl=point.isl, osl=point.osl, concurrency=point.num_requests)
    return Check(point=point, estimate=estimate(config, load, f))


def _group(c: Check) -> str:
    p = c.point
    return f"{p.source.key}: {p.model.split('/')[-1]} {p.quant} {p.gpu} TP{p.tp}"


def summarise(checks: list[Check]) -> dict[str, object]:
    """Mean absolute error overall and per (source, model, quant, GPU, TP) group."""
    def mae(cs: list[Check]) -> float:
        return sum(abs(c.error) for c in cs) / len(cs)

    groups: dict[str, list[Check]] = {}
    for c in checks:
        groups.setdefault(_group(c), []).append(c)
    worst = sorted(checks, key=lambda c: abs(c.error), reverse=True)[:5]
    fp8 = [c for c in checks if c.point.quant == "fp8"]
    return {
        "points": len(checks),
        "mean_abs_error": mae(checks),
        "mean_abs_error_fp8": mae(fp8) if fp8 else None,
        "mean_signed_error": sum(c.error for c in checks) / len(checks),
        "within_15pct": sum(abs(c.error) <= 0.15 for c in checks),
        "groups": {g: {"points": len(cs), "mean_abs_error": mae(cs),
                       "mean_signed_error": sum(c.error for c in cs) / len(cs)}
                   for g, cs in groups.items()},
        "worst": [{"point": c.point.label, "error": c.error} for c in worst],
    }


def _bottleneck(c: Check) -> str:
    return str(c.estimate.to_dict()["bottleneck"])


def markdown(checks: list[Check], summary: dict, commit: str) -> str:
    lines = [
        "# Published TensorRT-LLM throughput vs `pdtrt estimate`",
        "",
        f"Written by `benchmarks/published_points.py` (pdtrt at {commit}); the points and their "
        "sources are in `benchmarks/published/trtllm_perf_overview.yaml`. Error = predicted / "
        "published - 1 (negative: pdtrt predicts less than was measured).",
        "",
        f"**{summary['points']} points: mean absolute error {summary['mean_abs_error']:.1%}"
        + (f" (FP8 only: {summary['mean_abs_error_fp8']:.1%})"
           if summary["mean_abs_error_fp8"] is not None else "")
        + f", mean signed error {summary['mean_signed_error']:+.1%}, "
        f"{summary['within_15pct']} within 15%.**",
        "",
        "| group | points | mean abs. error | mean signed error |",
        "|---|---|---|---|",
    ]
    for g, s in summary["groups"].items():
        lines.append(f"| {g} | {s['points']} | {s['mean_abs_error']:.1%} | "
                     f"{s['mean_signed_error']:+.1%} |")
    lines += ["", "| source | model | GPU | TP | quant | ISL/OSL | max batch / tokens | "
              "published tok/s | predicted tok/s | error | pdtrt's bottleneck |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in checks:
        p = c.point
        lines.append(
            f"| {p.source.key} | {p.model.split('/')[-1]} | {p.gpu} | {p.tp} | {p.quant} | "
            f"{p.isl}/{p.osl} | {p.max_batch_size} / {p.max_num_tokens} | "
            f"{p.published_tok_per_s:,.0f} | {c.predicted_tok_per_s:,.0f} | {c.error:+.1%} | "
            f"{_bottleneck(c)} |")
    return "\n".join(lines) + "\n"


def _git_commit() -> str:
    import subprocess
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=RESULTS / "published_points.md",
                    help="markdown table; the JSON goes beside it (.json)")
    ap.add_argument("--only", help="only points on this GPU key (e.g. h100-sxm)")
    ap.add_argument("--print", action="store_true", help="print the table instead of writing")
    args = ap.parse_args(argv)
    points = load_points(args.data)
    if args.only:
        points = [p for p in points if p.gpu == args.only]
    f, catalog, models = load_factors(), load_catalog(), {}
    checks = [check_point(p, f, catalog, models) for p in points]
    summary = summarise(checks)
    text = markdown(checks, summary, _git_commit())
    if args.print:
        print(text)
        return 0
    args.out.write_text(text, encoding="utf-8")
    rows = [{"label": c.point.label, "source": c.point.source.key,
             "published_tok_per_s": c.point.published_tok_per_s,
             "predicted_tok_per_s": round(c.predicted_tok_per_s, 1),
             "error": round(c.error, 4), "bottleneck": _bottleneck(c)} for c in checks]
    args.out.with_suffix(".json").write_text(
        json.dumps({"summary": summary, "points": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"{summary['points']} points, mean abs. error {summary['mean_abs_error']:.1%}; "
          f"wrote {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
