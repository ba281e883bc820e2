"""Fitting the efficiency factors to measured serving runs, and the residuals of the fit.

Input: a CSV with aiconfigurator's measured-sample columns (``backend, precision, isl, osl,
batch_size, tp_size, pp_size, silicon_ttft_ms, silicon_tpot_ms`` ...), i.e. closed-loop
aggregated runs at ``batch_size`` concurrent clients. Each row is predicted with
:func:`pdtrt.perf.estimate.estimate` (closed loop) and the factors of one backend are chosen to
minimise the mean absolute percentage error (MAPE) of TTFT and TPOT together, by Nelder-Mead
on transformed parameters (logit for fractions, log for seconds) -- no SciPy. The result keeps
every residual so the fit can be documented and checked (``scripts/calibrate.py``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from pdtrt.enums import KVDType, ServingBackend, ServingMode, WeightQuant
from pdtrt.errors import CatalogError
from pdtrt.facts.catalog import Catalog
from pdtrt.facts.model import ModelFacts
from pdtrt.perf.estimate import Load, ServingConfig, estimate
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance

__all__ = ["CalibrationFit", "CalibrationRow", "fit_factors", "predict", "read_rows"]

_FRACTIONS = ("gemm_eff", "attention_eff", "bandwidth_eff", "startup_share")
_SECONDS = ("step_overhead_s", "allreduce_latency_s", "request_overhead_s")
FITTED = _FRACTIONS + _SECONDS
# Where the search starts: aiconfigurator's hints for bandwidth and latencies, a modest GEMM
# efficiency, and no preference between steady-state and start-up queueing.
START = EfficiencyFactors(gemm_eff=0.3, attention_eff=0.3, bandwidth_eff=0.8,
                          step_overhead_s=5e-4, allreduce_latency_s=2e-5,
                          request_overhead_s=0.02, startup_share=0.5)


@dataclass(frozen=True, kw_only=True)
class CalibrationRow:
    backend: ServingBackend
    backend_version: str
    gpu: str
    fp8: bool
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    ttft_ms: float
    tpot_ms: float


def read_rows(path: Path) -> list[CalibrationRow]:
    """Rows of a measured-calibration CSV; raises :class:`CatalogError` on a malformed file."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            raw = list(csv.DictReader(fh))
    except OSError as exc:
        raise CatalogError(f"cannot read calibration data {path}: {exc.strerror}") from None
    rows = []
    for i, r in enumerate(raw, start=2):
        try:
            rows.append(CalibrationRow(
                backend=ServingBackend(r["backend"]), backend_version=r["backend_version"],
                gpu=r["system"], fp8=r["gemm_quant_mode"] == "fp8", isl=int(r["isl"]),
                osl=int(r["osl"]), concurrency=int(float(r["batch_size"])),
                tp=int(float(r["tp_size"])), pp=int(float(r["pp_size"])),
                ttft_ms=float(r["silicon_ttft_ms"]), tpot_ms=float(r["silicon_tpot_ms"])))
        except (KeyError, ValueError) as exc:
            raise CatalogError(f"{path}:{i}: bad calibration row: {exc}") from None
    return rows


def predict(row: CalibrationRow, model: ModelFacts, catalog: Catalog,
            f: EfficiencyFactors) -> tuple[float, float]:
    """Predicted (TTFT ms, TPOT ms) of one measured run."""
    quant = WeightQuant.FP8 if row.fp8 else WeightQuant.NONE
    kv = KVDType.FP8 if row.fp8 else KVDType.BF16
    inst = Instance(model=model, gpu=catalog.get(row.gpu), tp=row.tp, pp=row.pp, weights=quant,
                    kv_dtype=kv, max_batch_size=max(row.concurrency, 1), max_num_tokens=8192)
    est = estimate(ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst),
                   Load(isl=row.isl, osl=row.osl, concurrency=row.concurrency), f)
    return est.ttft_s * 1e3, est.point.tpot_s * 1e3


@dataclass(frozen=True, kw_only=True)
class CalibrationFit:
    backend: ServingBackend
    factors: EfficiencyFactors
    rows: tuple[CalibrationRow, ...]
    predicted_ms: tuple[tuple[float, float], ...]
    evaluations: int

    def _ape(self, which: int) -> np.ndarray:
        meas = np.array([(r.ttft_ms, r.tpot_ms)[which] for r in self.rows])
        pred = np.array([p[which] for p in self.predicted_ms])
        return np.abs(pred - meas) / meas

    @property
    def ttft_mape(self) -> float:
        return float(self._ape(0).mean())

    @property
    def tpot_mape(self) -> float:
        return float(self._ape(1).mean())

    def summary(self) -> dict[str, object]:
        t, p = self._ape(0), self._ape(1)
        return {
            "backend": str(self.backend), "rows": len(self.rows), "evaluations": self.evaluations,
            "ttft_mape": round(float(t.mean()), 4), "tpot_mape": round(float(p.mean()), 4),
            "ttft_ape_median": round(float(np.median(t)), 4),
            "tpot_ape_median": round(float(np.median(p)), 4),
            "ttft_ape_p90": round(float(np.quantile(t, 0.9)), 4),
            "tpot_ape_p90": round(float(np.quantile(p, 0.9)), 4),
        }


def _to_vector(f: EfficiencyFactors) -> np.ndarray:
    out = []
    for name in FITTED:
        v = getattr(f, name)
        if name in _FRACTIONS:
            v = min(max(v, 1e-3), 1 - 1e-3)
            out.append(math.log(v / (1 - v)))
        else:
            out.append(math.log(max(v, 1e-7)))
    return np.array(out)


def _from_vector(x: np.ndarray) -> EfficiencyFactors:
    values = {}
    for name, v in zip(FITTED, x, strict=True):
        values[name] = 1 / (1 + math.exp(-v)) if name in _FRACTIONS else math.exp(v)
    return EfficiencyFactors(**values)


def nelder_mead(fun: Callable[[np.ndarray], float], x0: np.ndarray, *, max_evals: int,
                step: float = 0.5) -> tuple[np.ndarray, float, int]:
    """Minimise ``fun`` from ``x0`` (standard reflection/expansion/contraction/shrink)."""
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [fun(x) for x in simplex]
    evals = n + 1
    while evals < max_evals:
        order = np.argsort(values)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        if values[-1] - values[0] < 1e-6:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = fun(xr)
        evals += 1
        if fr < values[0]:
            xe = centroid + 2 * (centroid - simplex[-1])
            fe = fun(xe)
            evals += 1
            simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid)
            fc = fun(xc)
            evals += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    values[i] = fun(simplex[i])
                evals += n
    best = int(np.argmin(values))
    return simplex[best], values[best], evals


def fit_factors(rows: Sequence[CalibrationRow], model: ModelFacts, catalog: Catalog, *,
                backend: ServingBackend, start: EfficiencyFactors = START,
                max_evals: int = 300) -> CalibrationFit:
    """Fit the factors of ``backend`` on its rows (see module doc)."""
    mine = tuple(r for r in rows if r.backend is backend)
    if not mine:
        raise CatalogError(f"no calibration rows for backend {backend}")

    def objective(x: np.ndarray) -> float:
        f = _from_vector(x)
        err = 0.0
        for r in mine:
            ttft, tpot = predict(r, model, catalog, f)
            err += abs(ttft - r.ttft_ms) / r.ttft_ms + abs(tpot - r.tpot_ms) / r.tpot_ms
        return err / (2 * len(mine))

    # two rounds: the restart re-expands the simplex around the first optimum
    x, _, evals = nelder_mead(objective, _to_vector(start), max_evals=max_evals // 2)
    x, _, more = nelder_mead(objective, x, max_evals=max_evals - evals, step=0.25)
    evals += more
    best = _from_vector(x)
    rounded = EfficiencyFactors(**{f.name: float(f"{getattr(best, f.name):.4g}")
                                   for f in fields(EfficiencyFactors)})
    preds = tuple(predict(r, model, catalog, rounded) for r in mine)
    return CalibrationFit(backend=backend, factors=rounded, rows=mine, predicted_ms=preds,
                          evaluations=evals)
