"""Engine-only TTFT against the kernel tables' own sum (issue 30 item 1; benchmarks/engine_ttft.md
section 1): one prompt, no load, no harness terms, every GPU and precision with tables."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT

KERNELS = ROOT.parent / "shared" / "data" / "kernels"

pytestmark = pytest.mark.skipif(not KERNELS.is_dir(), reason="shared/data/kernels not present")


@pytest.fixture(scope="module")
def table():
    import importlib.util

    spec = importlib.util.spec_from_file_location("engine_ttft",
                                                  ROOT / "benchmarks" / "engine_ttft.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PROMPTS, mod.rows(KERNELS)


def test_engine_ttft_within_25_percent_of_the_kernel_sum_from_2048_tokens(table):
    prompts, rows = table
    for label, cells in rows:
        for isl, (kernel_s, engine_s, _) in zip(prompts, cells, strict=True):
            if isl >= 2048:
                assert engine_s == pytest.approx(kernel_s, rel=0.25), (label, isl)


def test_the_kernel_curves_alone_reproduce_the_kernel_sum_at_every_length(table):
    # what the engine adds beyond its kernels (launches, scheduling) is the fitted engine
    # terms; without them pdtrt's step is its curves' GEMMs, attention and elementwise work
    prompts, rows = table
    for label, cells in rows:
        for isl, (kernel_s, _, curves_s) in zip(prompts, cells, strict=True):
            assert curves_s == pytest.approx(kernel_s, rel=0.25), (label, isl)
