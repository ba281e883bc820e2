"""pdtrt spec validate / schema / init."""

from __future__ import annotations

import json

from conftest import EXAMPLES, ROOT

SEED = str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
REF = str(EXAMPLES / "reference-cpu.yaml")
BAD = ROOT / "tests" / "fixtures" / "bad_specs"


def test_validate_ok_exact_output(run):
    result = run("spec", "validate", SEED)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"ok: {SEED}: deployment 'llama3-8b-h100-l40s-trtllm-0.21', target trtllm-0.21, model "
        "meta-llama/Meta-Llama-3.1-8B",
        "  prefill: 1 x h100-sxm TP1 PP1 (1 GPU), weights none, KV fp8; each: weights 14.96 GiB, "
        "KV 54.21 GiB -> 216 sequences of 4096 tokens",
        "  decode: 2 x l40s TP1 PP1 (2 GPU), weights none, KV fp8; each: weights 14.96 GiB, "
        "KV 26.55 GiB -> 94 sequences of 4608 tokens",
        "  cost: $8.64/h",
    ]


def test_validate_several_files(run):
    result = run("spec", "validate", SEED, REF)
    assert result.exit_code == 0
    assert result.stdout.count("ok: ") == 2


def test_validate_bad_exit_2_one_line_and_hint(run):
    result = run("spec", "validate", str(BAD / "tp_kv_heads.yaml"))
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"error: {BAD / 'tp_kv_heads.yaml'}:6: prefill.tp: TP 3 does not")
    assert "Traceback" not in result.stderr


def test_validate_unknown_key_hint(run):
    result = run("spec", "validate", str(BAD / "unknown_top_key.yaml"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("hint: see `pdtrt spec schema`")


def test_validate_json(run):
    ok = json.loads(run("spec", "validate", SEED, "--json").stdout)
    assert ok["valid"] is True
    assert ok["deployment"]["pools"]["decode"]["gpu"] == "l40s"
    assert ok["deployment"]["pools"]["decode"]["memory"]["max_concurrent_seqs"] == 94
    result = run("spec", "validate", str(BAD / "unknown_gpu.yaml"), "--json")
    assert result.exit_code == 2
    bad = json.loads(result.stdout)
    assert bad["valid"] is False
    assert bad["issues"][0] == {"path": "decode.gpu", "line": 8, "message": bad["issues"][0][
        "message"]}
    assert "did you mean 'l40s'" in bad["issues"][0]["message"]


def test_validate_mixed_json_is_a_list(run):
    result = run("spec", "validate", SEED, str(BAD / "unknown_gpu.yaml"), "--json")
    assert result.exit_code == 2
    assert [r["valid"] for r in json.loads(result.stdout)] == [True, False]


def test_schema(run, tmp_path):
    result = run("spec", "schema")
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    assert "prefill" in schema["required"]
    out = tmp_path / "schema.json"
    result = run("spec", "schema", "-o", str(out), "--json")
    assert json.loads(result.stdout) == {"written": str(out)}
    assert json.loads(out.read_text()) == schema
    result = run("spec", "schema", "--output", str(out))
    assert result.stdout == f"wrote {out}\n"


def test_init_writes_example_and_refuses_overwrite(run, tmp_path):
    out = tmp_path / "pdtrt.yaml"
    result = run("spec", "init", "-o", str(out))
    assert result.exit_code == 0
    assert result.stdout == (f"wrote {out} (example llama3-8b-h100-l40s); check it "
                             f"with: pdtrt spec validate {out}\n")
    assert out.read_text() == (EXAMPLES / "llama3-8b-h100-l40s.yaml").read_text()
    again = run("spec", "init", "-o", str(out))
    assert again.exit_code == 2
    assert again.stderr == (f"error: {out} already exists\nhint: pass --force to overwrite it, "
                            "or choose another path with -o\n")
    forced = run("spec", "init", "--output", str(out), "--example", "reference-cpu", "--force",
                 "--json")
    assert json.loads(forced.stdout) == {"written": str(out), "example": "reference-cpu"}
    assert run("spec", "validate", str(out)).exit_code == 0


def test_init_to_stdout(run):
    result = run("spec", "init", "-o", "-", "--example", "reference-cpu")
    assert result.stdout == (EXAMPLES / "reference-cpu.yaml").read_text()


def test_init_json_error(run, tmp_path):
    out = tmp_path / "x.yaml"
    out.write_text("keep")
    result = run("spec", "init", "-o", str(out), "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"] == "PdtrtError"
    assert out.read_text() == "keep"
