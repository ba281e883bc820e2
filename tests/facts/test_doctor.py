"""pdtrt doctor: every check reported, nothing raised."""

from __future__ import annotations

from fakes import FakeNVML

from pdtrt.facts.doctor import CheckStatus, run_doctor


def test_without_gpu(catalog):
    report = run_doctor(catalog, nvml=FakeNVML(init_error="NVML Shared Library Not Found"))
    by_name = {c.name: c for c in report.checks}
    assert set(by_name) == {"python", "numpy", "GPUs", "embedded Triton", "ucxx", "TensorRT-LLM",
                            "LLM API"}
    assert by_name["GPUs"].status is CheckStatus.MISSING
    assert "NVML Shared Library Not Found" in by_name["GPUs"].detail
    assert by_name["python"].status is CheckStatus.OK
    assert by_name["numpy"].status is CheckStatus.OK  # the project pins numpy<2


def test_with_gpu(catalog):
    report = run_doctor(catalog, nvml=FakeNVML([("NVIDIA L40S", 48_305_799_168, (8, 9))]))
    gpus = next(c for c in report.checks if c.name == "GPUs")
    assert gpus.status is CheckStatus.OK and "driver 550.54.15" in gpus.detail
    assert report.to_dict()["gpus"]["gpus"][0]["catalog_key"] == "l40s"


def test_doctor_runs_the_engine_models_llm_api_check(catalog):
    """Where TensorRT-LLM is installed the check names what its release lacks; here it checks
    pdtrt's CPU twin of the pinned release."""
    import dataclasses

    from pdtrt.llmapi import LLMApiImpl, load_llm_api
    from pdtrt.llmapi.reference.params import DisaggregatedParams
    from tests.llmapi.twin_surfaces import without

    nvml = FakeNVML(init_error="NVML Shared Library Not Found")
    twin = {c.name: c for c in run_doctor(catalog, nvml=nvml).checks}["LLM API"]
    assert twin.status is CheckStatus.OK and "CPU twin of TensorRT-LLM 1.2.1" in twin.detail

    older = dataclasses.replace(
        load_llm_api(LLMApiImpl.REFERENCE), impl=LLMApiImpl.TENSORRT_LLM, version="1.1.0",
        DisaggregatedParams=without(DisaggregatedParams, "ctx_request_id"))
    checks = {c.name: c for c in run_doctor(catalog, nvml=nvml,
                                            load_llm_api=lambda: older).checks}
    assert checks["LLM API"].status is CheckStatus.PROBLEM
    assert "tensorrt_llm 1.1.0 lacks" in checks["LLM API"].detail
    assert "DisaggregatedParams.ctx_request_id" in checks["LLM API"].detail

    def broken():
        raise ImportError("libcuda.so.1: cannot open shared object file")

    checks = {c.name: c for c in run_doctor(catalog, nvml=nvml, load_llm_api=broken).checks}
    assert checks["LLM API"].status is CheckStatus.PROBLEM
    assert "libcuda.so.1" in checks["LLM API"].detail
