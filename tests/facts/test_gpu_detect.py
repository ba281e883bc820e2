"""NVML detection through a fake NVML (no GPU here), mapped to the catalog."""

from __future__ import annotations

from fakes import FakeNVML

from pdtrt.facts.gpu_detect import detect_gpus


def test_maps_h100_and_l40s(catalog):
    nvml = FakeNVML([("NVIDIA H100 80GB HBM3", 85_520_809_984, (9, 0)),
                     ("NVIDIA L40S", 48_305_799_168, (8, 9)),
                     ("NVIDIA A100-SXM4-40GB", 42_949_672_960, (8, 0))])
    found = detect_gpus(catalog, nvml)
    assert [g.catalog_key for g in found.gpus] == ["h100-sxm", "l40s", None]
    assert [g.compute_capability for g in found.gpus] == ["9.0", "8.9", "8.0"]
    assert found.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert found.driver_version == "550.54.15" and found.problem is None
    assert nvml.shutdown_calls == 1


def test_no_driver_is_reported_not_raised(catalog):
    found = detect_gpus(catalog, FakeNVML(init_error="NVML Shared Library Not Found"))
    assert found.gpus == ()
    assert "NVML Shared Library Not Found" in found.problem


def test_real_nvml_on_this_machine_does_not_raise(catalog):
    found = detect_gpus(catalog)  # real pynvml: a GPU machine lists GPUs, others say why not
    assert found.gpus or found.problem
