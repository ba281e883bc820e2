"""pdtrt repo SPEC -o DIR and pdtrt repo validate DIR: every option, exact output lines."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES

LLAMA = str(EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml")
REF = str(EXAMPLES / "reference-cpu.yaml")


def test_repo_writes_trtllm_repository(run, tmp_path):
    out = tmp_path / "out"
    result = run("repo", LLAMA, "-o", str(out), "--engines-dir", str(tmp_path / "eng"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"wrote {out}: trtllm-0.21 repository, mode disaggregated"
    assert lines[2].split() == ["prefill", "tensorrtllm", "max_batch_size", "8", "instances",
                                "1", "decoupled"]
    assert lines[6].split() == ["health", "python", "max_batch_size", "1", "instances", "1"]
    assert lines[7].split() == ["ensemble", "ensemble", "preprocessing", "->", "router", "->",
                                "postprocessing"]
    assert lines[-5:] == [
        f"  launch: {out / 'launch.sh'} (MPI world size 4, environment in {out / 'pdtrt.env'}); "
        "each host runs, in this order:",
        "    l40s host (PDTRT_HOST_L40S): ranks 2,3 -- decode; 2 GPU(s); waits for mpirun (sshd)",
        f"      $ PDTRT_SSH_DIR=/path/to/ssh-keys {out / 'launch.sh'} --worker",
        "    h100-sxm host (PDTRT_HOST_H100_SXM): ranks 0,1 -- orchestrator, prefill; 1 GPU(s); "
        "runs mpirun",
        "      $ PDTRT_SRC=/path/to/pdtrt-checkout PDTRT_SSH_DIR=/path/to/ssh-keys "
        f"PDTRT_HOST_H100_SXM=<h100-sxm address> PDTRT_HOST_L40S=<l40s address> "
        f"{out / 'launch.sh'}"]
    assert sorted(p.name for p in out.iterdir()) == [
        "decode", "ensemble", "health", "launch.sh", "pdtrt-repo.json", "pdtrt.env",
        "postprocessing", "prefill", "preprocessing", "router"]
    valid = run("repo", "validate", str(out))
    assert valid.exit_code == 0, valid.output
    assert valid.stdout == f"ok: {out}: 7 models, target trtllm-0.21, 4 warning(s)\n"
    assert valid.stderr.count("warning: ") == 4
    assert ("warning: preprocessing: tokenizer_dir meta-llama/Meta-Llama-3.1-8B does not exist "
            "here (the model loads its tokenizer from that local directory)") in valid.stderr


def test_repo_generate_alias_and_json(run, tmp_path):
    out = tmp_path / "out"
    result = run("repo", "generate", REF, "--output", str(out), "--mode", "both", "--json",
                 "--engines-dir", str(tmp_path / "eng"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["mode"] == "both" and data["target"] == "reference"
    assert data["models"] == ["preprocessing", "prefill", "decode", "aggregated", "router",
                              "postprocessing", "health", "ensemble", "ensemble_aggregated"]
    assert data["engine_dirs"]["aggregated"] == str(tmp_path / "eng" / "reference-cpu" /
                                                    "prefill")
    assert "mpi_world_size" not in data and "hosts" not in data


def test_repo_json_says_what_each_host_runs(run, tmp_path):
    out = tmp_path / "out"
    result = run("repo", LLAMA, "-o", str(out), "--mode", "both", "--json")
    data = json.loads(result.stdout)
    assert [h["command"] for h in data["hosts"]] == [
        f"PDTRT_SSH_DIR=/path/to/ssh-keys {out / 'launch.sh'} --worker",
        "PDTRT_SRC=/path/to/pdtrt-checkout PDTRT_SSH_DIR=/path/to/ssh-keys PDTRT_HOST_H100_SXM="
        f"<h100-sxm address> PDTRT_HOST_L40S=<l40s address> {out / 'launch.sh'}"]
    assert data["hosts"][1]["host"].startswith("h100-sxm host (PDTRT_HOST_H100_SXM): ranks "
                                               "0,1,4 -- orchestrator, prefill, aggregated;")


def test_repo_refuses_existing_dir_unless_force(run, tmp_path):
    out = tmp_path / "out"
    assert run("repo", REF, "-o", str(out), "--engines-dir", str(tmp_path / "e")).exit_code == 0
    (out / "stale.txt").write_text("old")
    again = run("repo", REF, "-o", str(out))
    assert again.exit_code == 2
    assert again.stderr == (f"error: {out} already exists and is not empty\n"
                            "hint: pass --force to replace it, or choose another -o DIR\n")
    forced = run("repo", REF, "-o", str(out), "--force", "--mode", "aggregated")
    assert forced.exit_code == 0, forced.output
    assert not (out / "stale.txt").exists() and (out / "ensemble_aggregated").is_dir()
    assert not (out / "router").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp dirs left behind


def test_repo_mode_conflict_is_a_clear_error(run, tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text((EXAMPLES / "reference-cpu.yaml").read_text().replace(
        "aggregated_below_tokens: 0", "aggregated_below_tokens: 64"))
    result = run("repo", str(spec), "-o", str(tmp_path / "out"), "--json")
    assert result.exit_code == 2
    data = json.loads(result.stdout)
    assert data["error"] == "RepoError"
    assert data["message"].startswith("router.aggregated_below_tokens is 64")
    assert run("repo", str(spec), "-o", str(tmp_path / "o2"), "--mode", "both").exit_code == 0


def test_repo_bad_spec(run, tmp_path):
    result = run("repo", str(tmp_path / "missing.yaml"), "-o", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "no such file" in result.stderr
    assert not (tmp_path / "out").exists()


def test_validate_reports_every_problem(run, tmp_path):
    out = tmp_path / "out"
    assert run("repo", REF, "-o", str(out), "--engines-dir", str(tmp_path / "e")).exit_code == 0
    router = out / "router" / "config.pbtxt"
    router.write_text(router.read_text().replace('"decode"', '"decoder"', 1))
    post = out / "postprocessing" / "config.pbtxt"
    post.write_text(post.read_text().replace("max_batch_size: 32", "max_batch_size: ${mbs}"))
    result = run("repo", "validate", str(out))
    assert result.exit_code == 2
    err = [line for line in result.stderr.splitlines() if not line.startswith("warning: ")]
    assert err[0] == f"error: {out}: 3 problem(s)"
    assert any("unfilled placeholder ${mbs} at line" in line for line in err)
    assert any("postprocessing: config.pbtxt does not parse" in line for line in err)
    assert any("parameter 'decode_model' names 'decoder', which is not a model of this repository "
               "(did you mean 'decode'?)" in line for line in err)
    data = json.loads(run("repo", "validate", str(out), "--json").stdout)
    assert data["ok"] is False and len(data["problems"]) == 3
    assert data["error"] == "RepoInvalidError"


def test_validate_require_engines(run, tmp_path):
    out = tmp_path / "out"
    assert run("repo", REF, "-o", str(out), "--engines-dir", str(tmp_path / "e")).exit_code == 0
    ok = run("repo", "validate", str(out), "--json")
    assert ok.exit_code == 0 and len(json.loads(ok.stdout)["warnings"]) == 4
    strict = run("repo", "validate", str(out), "--require-engines", "--json")
    assert strict.exit_code == 2
    problems = json.loads(strict.stdout)["problems"]
    assert problems == [
        f"decode: engine directory {tmp_path / 'e' / 'reference-cpu' / 'decode'} does not exist "
        "(build it with `pdtrt build SPEC`)",
        f"prefill: engine directory {tmp_path / 'e' / 'reference-cpu' / 'prefill'} does not "
        "exist (build it with `pdtrt build SPEC`)",
        *(f"{m}: tokenizer_dir {tmp_path / 'e' / 'reference-cpu' / 'tokenizer'} does not exist "
          "here (the model loads its tokenizer from that local directory)"
          for m in ("postprocessing", "preprocessing"))]


def test_validate_not_a_directory(run, tmp_path):
    result = run("repo", "validate", str(tmp_path / "nope"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {tmp_path / 'nope'} is not a directory")
