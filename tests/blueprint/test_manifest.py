"""Engine manifests: round trip, fingerprint, compatibility rules."""

from __future__ import annotations

import pytest

from pdtrt.blueprint.manifest import (
    EngineManifest,
    KVLayout,
    compatibility_problems,
    read_manifest,
    write_manifest,
)
from pdtrt.enums import KVDType, Phase, Target, WeightQuant
from pdtrt.errors import PdtrtError


def manifest(phase=Phase.PREFILL, **changes):
    layout = dict(num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype=KVDType.FP8,
                  tokens_per_block=32)
    layout.update(changes.pop("layout", {}))
    base = dict(phase=phase, target=Target.TRTLLM_0_21, model="meta-llama/Meta-Llama-3.1-8B",
                gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", tp=1, pp=1,
                weights=WeightQuant.NONE, kv_layout=KVLayout(**layout),
                versions={"tensorrt_llm": "0.21.0"}, build_settings={}, input_hashes={},
                pdtrt_version="0.1.0")
    base.update(changes)
    return EngineManifest(**base)


def test_round_trip_is_deterministic(tmp_path):
    m = manifest()
    path = write_manifest(tmp_path, m)
    first = path.read_bytes()
    assert read_manifest(tmp_path) == m
    write_manifest(tmp_path, read_manifest(tmp_path))
    assert path.read_bytes() == first


def test_fingerprint_tracks_layout():
    a = manifest().kv_layout
    assert a.fingerprint() == manifest(tp=2).kv_layout.fingerprint()
    assert a.fingerprint() != manifest(layout={"tokens_per_block": 64}).kv_layout.fingerprint()


def test_tp_and_weights_may_differ():
    decode = manifest(Phase.DECODE, tp=2, weights=WeightQuant.FP8, gpu_name="NVIDIA L40S",
                      compute_capability="8.9")
    assert compatibility_problems(manifest(), decode) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"layout": {"kv_dtype": KVDType.BF16}}, "kv_dtype prefill fp8 != decode bf16"),
     ({"layout": {"tokens_per_block": 64}}, "tokens_per_block prefill 32 != decode 64"),
     ({"layout": {"head_dim": 64}}, "head_dim prefill 128 != decode 64"),
     ({"layout": {"num_layers": 30}}, "num_layers prefill 32 != decode 30"),
     ({"layout": {"num_kv_heads": 4}}, "num_kv_heads prefill 8 != decode 4"),
     ({"versions": {"tensorrt_llm": "0.20.0"}}, "TensorRT-LLM versions differ"),
     ({"model": "other"}, "models differ")],
)
def test_incompatible(changes, message):
    problems = compatibility_problems(manifest(), manifest(Phase.DECODE, **changes))
    assert len(problems) == 1 and message in problems[0]


def test_missing_and_invalid(tmp_path):
    with pytest.raises(PdtrtError, match="has no pdtrt-engine.json"):
        read_manifest(tmp_path)
    (tmp_path / "pdtrt-engine.json").write_text('{"phase": "prefill"}')
    with pytest.raises(PdtrtError, match="invalid manifest"):
        read_manifest(tmp_path)
