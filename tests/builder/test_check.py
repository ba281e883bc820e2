"""pdtrt engines check: manifests vs each other, vs the engine config.json, a spec, this GPU."""

from __future__ import annotations

import dataclasses
import json
import shutil

from conftest import EXAMPLES
from fakes import FakeNVML

from pdtrt.blueprint.manifest import read_manifest, write_manifest
from pdtrt.builder.check import check_engines


def _copy(reference_engines, tmp_path):
    root, dep = reference_engines
    dst = tmp_path / dep.spec.name
    shutil.copytree(root / dep.spec.name, dst, symlinks=True)
    return dst


def _edit_manifest(engine_dir, **kv):
    m = read_manifest(engine_dir)
    update = {"kv_layout": dataclasses.replace(m.kv_layout, **kv)} if kv else {}
    return m.model_copy(update=update)


def test_reference_pair_is_compatible(reference_engines):
    root, dep = reference_engines
    report = check_engines([EXAMPLES / "reference-cpu.yaml"], engines_root=root)
    assert report.ok, report.problems
    assert len(report.pairs) == 1 and len(report.engines) == 2


def test_mismatched_pair_fails_with_the_reason(reference_engines, tmp_path):
    d = _copy(reference_engines, tmp_path)
    write_manifest(d / "decode", _edit_manifest(d / "decode", tokens_per_block=32))
    report = check_engines([d / "prefill", d / "decode"])
    assert not report.ok
    assert any("KV layout differs: tokens_per_block prefill 16 != decode 32" in p
               for p in report.problems)


def test_manifest_disagreeing_with_config_json(reference_engines, tmp_path):
    d = _copy(reference_engines, tmp_path)
    config = d / "decode" / "config.json"
    data = json.loads(config.read_text())
    data["num_hidden_layers"] = 3
    config.unlink()
    config.write_text(json.dumps(data))
    report = check_engines([d])
    assert any("num_layers 3 but the manifest says 2" in p for p in report.problems)


def _trtllm_engine(engine_dir, *, version="0.21.0", kv_algo="FP8", cc="9.0", tpb=32):
    engine_dir.mkdir(parents=True)
    (engine_dir / "config.json").write_text(json.dumps({
        "version": version,
        "pretrained_config": {"num_hidden_layers": 32, "num_key_value_heads": 8,
                              "head_size": 128, "quantization": {"kv_cache_quant_algo":
                                                                  kv_algo}},
        "build_config": {"plugin_config": {"tokens_per_block": tpb}}}))
    from pdtrt.blueprint.manifest import EngineManifest, KVLayout
    write_manifest(engine_dir, EngineManifest(
        phase="decode", target="trtllm-0.21", model="m", gpu_name="NVIDIA L40S",
        compute_capability=cc, tp=1, pp=1, weights="none",
        kv_layout=KVLayout(num_layers=32, num_kv_heads=8, head_dim=128, kv_dtype="fp8",
                           tokens_per_block=32),
        versions={"tensorrt_llm": "0.21.0"}, build_settings={}, input_hashes={},
        pdtrt_version="t"))


def test_trtllm_config_json_is_read(tmp_path):
    _trtllm_engine(tmp_path / "ok")
    assert check_engines([tmp_path / "ok"]).ok
    _trtllm_engine(tmp_path / "bad", version="1.0.0", kv_algo=None, tpb=64)
    problems = check_engines([tmp_path / "bad"]).problems
    assert any("built by TensorRT-LLM 1.0.0, the manifest says 0.21.0" in p for p in problems)
    assert any("kv_cache_quant_algo None but the manifest says KV fp8" in p for p in problems)
    assert any("tokens_per_block 64 but the manifest says 32" in p for p in problems)


def test_here_needs_a_gpu_of_the_engines_compute_capability(tmp_path):
    _trtllm_engine(tmp_path / "e", cc="8.9")
    ok = check_engines([tmp_path / "e"], here=True,
                       nvml=FakeNVML([("NVIDIA L40S", 48 << 30, (8, 9))]))
    assert ok.ok
    bad = check_engines([tmp_path / "e"], here=True,
                        nvml=FakeNVML([("NVIDIA H100 80GB HBM3", 80 << 30, (9, 0))]))
    assert check_engines([tmp_path / "e"], nvml=FakeNVML()).info[1:] == [
        f"{tmp_path / 'e'}: cannot load on this machine (needs compute 8.9; this machine has: "
        "no GPU); --here makes this an error"]
    assert ok.info[1:] == [f"{tmp_path / 'e'}: loads on this machine's NVIDIA L40S"]
    assert bad.problems == [f"{tmp_path / 'e'}: needs a GPU of compute 8.9 (NVIDIA L40S); "
                            "this machine has: NVIDIA H100 80GB HBM3 (compute 9.0)"]
