"""Kernel-derived efficiencies: the shipped file reproduces from the shared tables, carries its
provenance, covers every measured GPU and dtype on its own curves, and interpolates sanely."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.perf.kernel_derive import derive, dump_json
from pdtrt.perf.kernels import (
    BUILTIN,
    LogGrid,
    kernel_notes,
    load_kernel_factors,
    resolve,
    scalar_fallback,
)
from tests.conftest import ROOT

SHIPPED = ROOT / "pdtrt" / BUILTIN
KERNELS = ROOT.parent / "shared" / "data" / "kernels"
MEASURED = {"h100-sxm": ("bf16", "fp8"), "h200": ("bf16", "fp8"), "l40s": ("bf16", "fp8"),
            "a100-sxm": ("bf16",)}
needs_tables = pytest.mark.skipif(not KERNELS.is_dir(),
                                  reason=f"shared kernel tables not present at {KERNELS}")


@pytest.fixture(scope="module")
def kf():
    return load_kernel_factors()


@needs_tables
def test_derivation_reproduces_the_shipped_file(catalog):
    assert dump_json(derive(KERNELS, catalog)) + "\n" == SHIPPED.read_text(encoding="utf-8"), (
        "re-run: .venv/bin/python scripts/derive_kernel_factors.py")


@needs_tables
def test_provenance_names_every_table_with_its_hash():
    files = json.loads(SHIPPED.read_text())["provenance"]["files"]
    tables = sorted(p.relative_to(KERNELS).as_posix() for p in KERNELS.glob("*/*.csv.gz"))
    assert sorted(files) == tables
    for name, entry in files.items():
        assert entry["sha256"] == hashlib.sha256((KERNELS / name).read_bytes()).hexdigest()


def test_shipped_file_is_small_and_documented():
    data = json.loads(SHIPPED.read_text())
    assert SHIPPED.stat().st_size < 200_000
    prov = data["provenance"]
    assert prov["command"] == "python scripts/derive_kernel_factors.py"
    assert "aiconfigurator-core 0.12.0" in prov["origin"]
    assert all(len(f["sha256"]) == 64 for f in prov["files"].values())


@pytest.mark.parametrize("gpu", sorted(MEASURED))
def test_every_measured_gpu_has_its_own_curves(kf, catalog, gpu):
    curves, note = resolve(kf, catalog.get(gpu))
    assert note is None and curves is not None and curves.gpu == gpu
    assert set(curves.gemm) == set(MEASURED[gpu])
    assert set(curves.context_attention) == set(MEASURED[gpu])
    assert set(curves.generation_attention) >= {"bf16"}
    assert sorted(curves.allreduce) == [2, 4, 8]
    for dt in MEASURED[gpu]:
        assert 0.5 < curves.weight_stream_bw_eff[dt] <= 1.0
        big, small = curves.gemm[dt](8192, 8192, 8192), curves.gemm[dt](1, 8192, 8192)
        assert 0.3 < big <= 1.0 and small < 0.05 * big  # compute- vs bandwidth-bound


def test_no_efficiency_is_shared_between_gpus_or_dtypes(kf):
    h100, l40s = kf.gpus["h100-sxm"], kf.gpus["l40s"]
    assert h100.gemm["bf16"].values != l40s.gemm["bf16"].values
    assert h100.gemm["bf16"].values != h100.gemm["fp8"].values
    assert h100.weight_stream_bw_eff != l40s.weight_stream_bw_eff


def test_log_grid_interpolates_in_log_space_and_clamps():
    g = LogGrid(((1.0, 4.0), (10.0, 1000.0)), (0.0, 1.0, 2.0, 3.0))
    assert g(1, 10) == 0.0 and g(4, 1000) == 3.0
    assert g(2, 10) == pytest.approx(1.0)  # halfway in log2 between 1 and 4
    assert g(1, 100) == pytest.approx(0.5)
    assert g(0.1, 1) == 0.0 and g(100, 1e6) == 3.0  # clamped at both edges


def test_allreduce_grows_with_message_and_gpus(kf):
    h100, l40s = kf.gpus["h100-sxm"], kf.gpus["l40s"]
    assert h100.allreduce_s(2, 1e6) < h100.allreduce_s(2, 1e8)
    assert h100.allreduce_s(2, 1e6) < h100.allreduce_s(8, 1e6)
    assert l40s.allreduce_s(4, 1e6) > 3 * h100.allreduce_s(4, 1e6)  # PCIe, no NVLink
    top = max(h100.allreduce[2].axes[0])
    assert h100.allreduce_s(2, 2 * top) == pytest.approx(2 * h100.allreduce_s(2, top))


def test_unmeasured_gpus_borrow_their_architecture_and_say_so(kf, catalog):
    curves, note = resolve(kf, catalog.get("l4"))
    assert curves is kf.gpus["l40s"] and "using l40s's efficiencies" in note
    curves, note = resolve(kf, catalog.get("a10g"))
    assert curves is None and "scalar efficiency factors" in note


def test_notes_name_every_borrowed_dtype(kf, catalog):
    a100 = catalog.get("a100-sxm")
    notes = kernel_notes(kf, a100, dtype=DType.BF16, weights=WeightQuant.NONE,
                         kv_dtype=KVDType.FP8)
    assert any("no fp8 KV-cache attention measurements" in n for n in notes)
    assert kernel_notes(kf, catalog.get("h100-sxm"), dtype=DType.BF16,
                        weights=WeightQuant.FP8, kv_dtype=KVDType.FP8) == ()
    notes = kernel_notes(kf, catalog.get("h100-sxm"), dtype=DType.BF16,
                         weights=WeightQuant.INT4_AWQ, kv_dtype=KVDType.BF16)
    assert any("int4-awq" in n for n in notes)


def test_scalar_fallback_is_a_median_of_the_curves(kf):
    s = scalar_fallback(kf)
    gemms = sorted(g.gemm["bf16"](4096, 4096, 4096) for g in kf.gpus.values())
    assert gemms[0] <= s["gemm_eff"] <= gemms[-1]
    assert all(0 < v <= 1 and math.isfinite(v) for v in s.values())
