"""pdtrt doctor: every check reported, nothing raised."""

from __future__ import annotations

from fakes import FakeNVML

from pdtrt.facts.doctor import CheckStatus, run_doctor


def test_without_gpu(catalog):
    report = run_doctor(catalog, nvml=FakeNVML(init_error="NVML Shared Library Not Found"))
    by_name = {c.name: c for c in report.checks}
    assert set(by_name) == {"python", "numpy", "GPUs", "embedded Triton", "ucxx", "TensorRT-LLM"}
    assert by_name["GPUs"].status is CheckStatus.MISSING
    assert "NVML Shared Library Not Found" in by_name["GPUs"].detail
    assert by_name["python"].status is CheckStatus.OK
    assert by_name["numpy"].status is CheckStatus.OK  # the project pins numpy<2


def test_with_gpu(catalog):
    report = run_doctor(catalog, nvml=FakeNVML([("NVIDIA L40S", 48_305_799_168, (8, 9))]))
    gpus = next(c for c in report.checks if c.name == "GPUs")
    assert gpus.status is CheckStatus.OK and "driver 550.54.15" in gpus.detail
    assert report.to_dict()["gpus"]["gpus"][0]["catalog_key"] == "l40s"
