"""The reference target's build: deterministic files, loadable by transformers, usable tokenizer."""

from __future__ import annotations

import hashlib

from conftest import EXAMPLES

from pdtrt.blueprint.manifest import MANIFEST_NAME, STAMP_NAME, EngineLayout, read_manifest
from pdtrt.builder.plan import plan_build
from pdtrt.builder.run import run_build
from pdtrt.enums import Phase, Target
from pdtrt.spec.load import load_deployment


def _hashes(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.parent.name != "logs"}


def test_layout_and_manifests(reference_engines):
    root, dep = reference_engines
    layout = EngineLayout(root, dep.spec.name)
    for phase in Phase:
        d = layout.phase_dir(phase)
        assert {"config.json", "model.safetensors", "pdtrt-engine.json"} <= {
            p.name for p in d.iterdir()}
        m = read_manifest(d)
        assert (m.target, m.phase, m.gpu_name, m.compute_capability) == (
            Target.REFERENCE, phase, None, None)
        assert m.kv_layout.tokens_per_block == 16 and m.kv_layout.kv_dtype == "fp32"
        assert m.versions["tensorrt_llm"] is None and m.versions["transformers"]
    assert (layout.tokenizer_dir / "tokenizer.json").is_file()
    same = _hashes(layout.phase_dir(Phase.PREFILL))
    assert same["model.safetensors"] == _hashes(layout.phase_dir(Phase.DECODE))[
        "model.safetensors"]


def test_two_builds_are_byte_identical(reference_engines, tmp_path):
    root, dep = reference_engines
    run_build(plan_build(dep, engines_root=tmp_path), dep)
    first, second = _hashes(root / dep.spec.name), _hashes(tmp_path / dep.spec.name)
    assert first == second
    assert "tokenizer/tokenizer.json" in first and "decode/model.safetensors" in first


def test_transformers_loads_and_generates(reference_engines):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root, dep = reference_engines
    layout = EngineLayout(root, dep.spec.name)
    tok = AutoTokenizer.from_pretrained(layout.tokenizer_dir)
    model = AutoModelForCausalLM.from_pretrained(layout.phase_dir(Phase.DECODE))
    assert model.config.vocab_size == len(tok) == 512
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    assert (model.config.bos_token_id, model.config.eos_token_id) == (1, 2)
    ids = tok("The keeper lit the lamp.", return_tensors="pt")
    assert ids["input_ids"][0, 0].item() == 1  # <s> prepended
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert out.shape == (1, ids["input_ids"].shape[1] + 5)


def test_tokenizer_round_trips_text(reference_engines):
    from transformers import AutoTokenizer

    root, dep = reference_engines
    tok = AutoTokenizer.from_pretrained(EngineLayout(root, dep.spec.name).tokenizer_dir)
    for text in ("Seven ships passed on the first of March.", "naïve café, 東京 — ok?\n\ttab"):
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text


def test_a_real_local_checkpoint_is_used_as_is(reference_engines, tmp_path):
    root, dep = reference_engines
    ckpt = root / dep.spec.name / "prefill"
    spec = tmp_path / "real.yaml"
    spec.write_text((EXAMPLES / "reference-cpu.yaml").read_text().replace(
        "  seed: 0\n", f"  seed: 0\n  path: {ckpt}\n"))
    real = load_deployment(spec)
    source_stamp = (ckpt / STAMP_NAME).read_bytes()
    run_build(plan_build(real, engines_root=tmp_path / "e"), real)
    out = tmp_path / "e" / "reference-cpu" / "decode"
    # the build's own stamp and manifest are its files, never links into the source checkpoint
    for name in (STAMP_NAME, MANIFEST_NAME):
        assert not (tmp_path / "e" / "reference-cpu" / "prefill" / name).is_symlink()
    assert (ckpt / STAMP_NAME).read_bytes() == source_stamp
    assert (out / "model.safetensors").is_symlink()
    assert (out / "model.safetensors").resolve() == (ckpt / "model.safetensors").resolve()
