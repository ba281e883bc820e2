"""The GPU catalog: loading, name resolution, figures from hardware.md, price overrides."""

from __future__ import annotations

import pytest

from pdtrt.errors import CatalogError
from pdtrt.facts.catalog import load_catalog, load_prices

REQUIRED = ["h100-sxm", "h100-pcie", "h200", "l40s", "l4", "a100-sxm", "a100-pcie", "a10g"]


def test_required_gpus_present(catalog):
    assert set(REQUIRED) <= set(catalog.keys)


@pytest.mark.parametrize(
    ("name", "cc", "bf16_tflops", "fp8_tflops", "mem_gib", "bw_tb_s"),
    [
        ("h100-sxm", "9.0", 989, 1979, 80, 3.35),
        ("h100-pcie", "9.0", 756, 1513, 80, 2.0),
        ("h200", "9.0", 989, 1979, 141, 4.8),
        ("l40s", "8.9", 362, 733, 48, 0.864),
        ("l4", "8.9", 121, 242.5, 24, 0.3),
        ("a100-sxm", "8.0", 312, None, 80, 2.04),
        ("a100-pcie", "8.0", 312, None, 80, 1.94),
        ("a10g", "8.6", 125, None, 24, 0.6),
    ],
)
def test_datasheet_figures(catalog, name, cc, bf16_tflops, fp8_tflops, mem_gib, bw_tb_s):
    g = catalog.get(name)
    assert g.compute_capability == cc
    assert g.bf16_dense_flops_per_s == pytest.approx(bf16_tflops * 1e12)
    assert (g.fp8_dense_flops_per_s is None) == (fp8_tflops is None)
    if fp8_tflops:
        assert g.fp8_dense_flops_per_s == pytest.approx(fp8_tflops * 1e12)
    assert g.memory_bytes == mem_gib * (1 << 30)
    assert g.memory_bw_bytes_per_s == pytest.approx(bw_tb_s * 1e12)


def test_l40s_has_no_nvlink(catalog):
    assert catalog.get("l40s").gpu_link == "pcie4"
    assert catalog.get("h100-sxm").gpu_link_bytes_per_s == 450e9


@pytest.mark.parametrize("alias", ["H100", "h100_sxm", "H100-SXM5", "NVIDIA H100 80GB HBM3"])
def test_aliases_resolve(catalog, alias):
    assert catalog.get(alias).key == "h100-sxm"


@pytest.mark.parametrize(
    ("nvml", "key"),
    [("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA L40S", "l40s"), ("NVIDIA H200", "h200"),
     ("NVIDIA A100-SXM4-80GB", "a100-sxm"), ("NVIDIA A100 80GB PCIe", "a100-pcie"),
     ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("NVIDIA H100 PCIe", "h100-pcie")],
)
def test_nvml_names_map(catalog, nvml, key):
    assert catalog.from_nvml_name(nvml).key == key


def test_unknown_nvml_name_is_none(catalog):
    assert catalog.from_nvml_name("NVIDIA A100-SXM4-40GB") is None


def test_sm_version(catalog):
    assert catalog.get("l40s").sm_version == 89 and catalog.get("cpu").sm_version is None


def test_unknown_gpu_suggests(catalog):
    with pytest.raises(CatalogError, match=r"unknown GPU 'l40' \(did you mean 'l40s'\?\)"):
        catalog.get("l40")


def test_price_override(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("h100: 2.94\nl40s: 1.58\n")
    catalog = load_catalog(load_prices(prices))
    assert catalog.get("h100-sxm").price_per_hour_usd == 2.94
    assert catalog.get("l40s").price_source == "user prices file"
    assert load_catalog().get("h100-sxm").price_per_hour_usd == 4.916  # default untouched


@pytest.mark.parametrize(
    ("text", "message"),
    [("- 1\n", "must be a mapping"), ("h100: -1\n", "must be a number >= 0"),
     ("h100: cheap\n", "must be a number >= 0"), ("h100: [1\n", "not valid YAML")],
)
def test_bad_prices_file(tmp_path, text, message):
    prices = tmp_path / "prices.yaml"
    prices.write_text(text)
    with pytest.raises(CatalogError, match=message):
        load_prices(prices)


def test_prices_for_unknown_gpu_rejected(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("b200: 9\n")
    with pytest.raises(CatalogError, match="unknown GPU 'b200'"):
        load_catalog(load_prices(prices))
