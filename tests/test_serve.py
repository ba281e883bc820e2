"""pdtrt.serve without a server: the environment handed to tritonserver, repository detection."""

from __future__ import annotations

import json

from conftest import EXAMPLES, ROOT

from pdtrt.serve import kv_environment, prepare
from pdtrt.spec_load import load_spec

GOLDEN_TRTLLM = ROOT / "tests" / "golden" / "repo" / "llama3-8b-h100-l40s-both"


def test_environment_from_spec_and_trtllm_manifest():
    spec = load_spec(EXAMPLES / "llama3-8b-h100-l40s.yaml")
    manifest = json.loads((GOLDEN_TRTLLM / "pdtrt-repo.json").read_text())
    env = kv_environment(spec, manifest)
    assert env["UCX_TLS"] == manifest["launch"]["env"]["UCX_TLS"]
    assert env["TRTLLM_USE_UCX_KVCACHE"] == "1"
    assert env["TRTLLM_ORCHESTRATOR"] == "1"


def test_environment_of_the_reference_spec():
    env = kv_environment(load_spec(EXAMPLES / "reference-cpu.yaml"), {})
    assert env == {"UCX_WARN_UNUSED_ENV_VARS": "n", "UCX_TLS": "sm,tcp"}


def test_a_repository_is_served_as_is_with_its_spec(tmp_path):
    prepared = prepare(GOLDEN_TRTLLM, workdir=tmp_path, engines_root=tmp_path / "engines")
    assert prepared.repository == GOLDEN_TRTLLM.resolve()
    assert prepared.spec is not None and prepared.spec.name == "llama3-8b-h100-l40s"
    assert prepared.built == ()
