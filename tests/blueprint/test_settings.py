"""How each build setting is chosen: spec > profile > computed; profile data and selection."""

from __future__ import annotations

import pytest
from buildspecs import variant, write_spec

from pdtrt.blueprint.profiles import load_profiles, select_profile
from pdtrt.blueprint.settings import resolve_settings
from pdtrt.enums import Phase
from pdtrt.errors import BuildError
from pdtrt.facts.memory import fit
from pdtrt.spec.load import load_deployment


def test_builtin_profiles_load_and_cover_the_issue():
    names = {p.name for p in load_profiles()}
    assert {"h100-prefill", "l40s-decode", "h200-prefill", "a100-prefill", "l4-decode",
            "default-prefill", "default-decode"} <= names


@pytest.mark.parametrize(("gpu", "phase", "profile"), [
    ("h100-sxm", Phase.PREFILL, "h100-prefill"), ("h100-pcie", Phase.PREFILL, "h100-prefill"),
    ("l40s", Phase.DECODE, "l40s-decode"), ("h200", Phase.DECODE, "hopper-decode"),
    ("a10g", Phase.PREFILL, "default-prefill"), ("a10g", Phase.DECODE, "default-decode"),
])
def test_select_profile(gpu, phase, profile):
    assert select_profile(load_profiles(), gpu, phase).name == profile


def test_profile_name_must_match_file(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "name: y\nphase: decode\ngpus: []\ndescription: d\n"
        "settings: {max_batch_size: 1, max_num_tokens: 32}\n")
    with pytest.raises(BuildError, match="x.yaml is named 'y'") as err:
        load_profiles(tmp_path)
    assert err.value.hint == "a profile's name must equal its file name: x"


def test_sources(tmp_path):
    def edit(d):
        d["decode"]["engine"].pop("max_num_tokens")
        d["decode"]["engine"].pop("max_input_len")
        d["decode"]["engine"].pop("max_seq_len")
    dep = load_deployment(write_spec(tmp_path, variant(edit)))
    s = resolve_settings(dep, Phase.DECODE, select_profile(load_profiles(), "l40s",
                                                           Phase.DECODE))
    assert s.values["max_input_len"].describe() == "computed: workload.isl"
    assert s["max_seq_len"] == 3500
    assert s.values["tokens_per_block"].describe() == "spec: decode.engine.tokens_per_block"
    assert s.values["gemm_plugin"].describe() == "profile: l40s-decode"
    # the KV capacity at ISL + OSL, by hand: fit at the cap's token budget, minus the buffer
    mem = fit(dep.model, dep.gpus[Phase.DECODE], seq_len=3500, kv_dtype=dep.spec.model
              .kv_cache_dtype, max_num_tokens=256, tokens_per_block=32)
    blocks = int((mem.free_bytes - 512 * 2**20) * 0.9) // (65536 * 32)
    assert s["max_batch_size"] == min(blocks // 110, 256)
    assert s.values["max_batch_size"].source == "computed"
    assert s["max_num_tokens"] == -(-s["max_batch_size"] // 32) * 32
    assert "rounded up to a multiple of tokens_per_block 32" in s.values["max_num_tokens"].why


def test_invalid_profile_names_the_field(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "name: x\nphase: decode\ngpus: []\ndescription: d\n"
        "settings: {max_batch_size: lots, max_num_tokens: 32}\n")
    with pytest.raises(BuildError, match=r"invalid engine profile .*x.yaml: "
                       r"settings.max_batch_size"):
        load_profiles(tmp_path)
