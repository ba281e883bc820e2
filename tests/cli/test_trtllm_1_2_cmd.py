"""trtllm-1.2 on the command line: a bad LLM-API option stops `pdtrt build`, and `pdtrt repo`
says what each host runs (this server, and the pool in the other host's server)."""

from __future__ import annotations

import json

from conftest import EXAMPLES

from pdtrt.blueprint.settings import SettingSource
from pdtrt.targets import trtllm_1_2
from pdtrt.targets.llm_options import LlmOption

SPEC = str(EXAMPLES / "llama3-8b-h100-l40s.yaml")


def test_build_refuses_a_misspelt_option_with_did_you_mean(monkeypatch, run):
    real = trtllm_1_2.phase_options
    seeded = LlmOption(key="kv_cache_config.enable_block_resue", value=False,
                       source=SettingSource.COMPUTED, why="seeded")
    monkeypatch.setattr(trtllm_1_2, "phase_options",
                        lambda *args: (*real(*args), seeded))
    result = run("build", SPEC, "--dry-run")
    assert result.exit_code != 0
    assert ("engines/llama3-8b-h100-l40s/prefill/extra_llm_api_options.yaml: "
            "kv_cache_config.enable_block_resue: KvCacheConfig has no field 'enable_block_resue' "
            "(did you mean 'enable_block_reuse'?)") in result.stderr


def test_repo_says_what_each_host_runs(run, tmp_path):
    out, pools = tmp_path / "repo", tmp_path / "pools"
    result = run("repo", SPEC, "-o", str(out), "--mode", "both")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "wrote " + str(out) + ": trtllm-1.2 repository, mode both"
    assert (f"  launch: {out}/launch.sh (one Triton server, environment in {out}/pdtrt.env); "
            "each host runs, in this order:") in lines
    assert "    h100-sxm host: one Triton server -- prefill, aggregated; 2 GPU(s)" in lines
    assert f"      $ PDTRT_SRC=/path/to/pdtrt-checkout {out}/launch.sh" in lines
    assert lines[-1] == (f"  pool decode: another Triton server at l40s-host:8001 (its host "
                         f"serves `pdtrt repo {SPEC} -o DIR --mode pools`)")
    result = run("repo", SPEC, "-o", str(pools), "--mode", "pools", "--json")
    assert result.exit_code == 0, result.output
    hosts = json.loads(result.stdout)["hosts"]
    assert hosts == [{"host": "l40s host: one Triton server -- decode; 2 GPU(s)",
                      "command": f"PDTRT_SRC=/path/to/pdtrt-checkout {pools}/launch.sh"}]
    valid = run("repo", "validate", str(pools))
    assert valid.exit_code == 0, valid.output
