"""``pdtrt preflight``: every model's code and every late import, checked before a server.

The trtllm-1.2 repositories are checked here, where TensorRT-LLM is absent: every model imports
(the LLM-API engine models load ``tensorrt_llm`` only when Triton initializes them), and the one
problem is that absence -- what a container without TensorRT-LLM would be told.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pdtrt.cli.main import cli
from pdtrt.facts.doctor import CheckStatus
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.serve.preflight import run_preflight
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES

SPEC = EXAMPLES / "llama3-8b-h100-l40s.yaml"


def _no_llm_api():
    raise ImportError("No module named 'tensorrt_llm'")


@pytest.fixture(scope="module")
def flagship(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("preflight") / "repo"
    generate_repo(load_deployment(SPEC), repo, mode=RepoMode.BOTH,
                  engines_root=repo.parent / "engines")
    return repo


def test_every_model_imports_and_the_missing_llm_api_is_the_one_problem(flagship):
    report = run_preflight(flagship, load_llm_api=_no_llm_api)
    imports = {c.name: c.status for c in report.checks if c.name.startswith("import ")}
    models = sorted(p.parent.parent.name for p in flagship.glob("*/1/model.py"))
    assert models == ["aggregated", "health", "postprocessing", "prefill", "preprocessing",
                      "router"]
    assert {f"import {m}" for m in models} <= set(imports)
    # imported later by pdtrt, and what the image recipe adds
    assert {"import tritonclient.grpc", "import transformers", "import rich",
            "import aiohttp"} <= set(imports)
    assert [(c.name, c.status) for c in report.problems] == [("LLM API", CheckStatus.PROBLEM)]
    assert "tensorrt_llm does not import" in report.problems[0].detail
    assert report.target == "trtllm-1.2" and report.versions["python"]


def test_a_model_whose_code_does_not_import_is_named(flagship, tmp_path):
    repo = tmp_path / "repo"
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.py").write_text("import no_such_module_pdtrt\n")
    [problem] = [c for c in run_preflight(repo).problems if c.name == "import broken"]
    assert problem.detail == "ModuleNotFoundError: No module named 'no_such_module_pdtrt'"
    assert str(repo / "broken" / "1" / "model.py") in problem.needed_for


def test_the_cli_lists_every_problem_and_exits_2(tmp_path):
    repo = tmp_path / "repo"
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "1" / "model.py").write_text("import no_such_module_pdtrt\n")
    result = CliRunner().invoke(cli, ["preflight", str(repo)])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert lines[0] == f"preflight of {repo} (no pdtrt-repo.json)"
    assert lines[1].startswith("versions: python ")
    assert ("problem  import broken: ModuleNotFoundError: No module named "
            "'no_such_module_pdtrt'") in lines
    assert lines[-1].startswith("preflight: 1 problem(s); the server would not serve")
    result = CliRunner().invoke(cli, ["preflight", str(repo), "--json"])
    assert result.exit_code == 2 and json.loads(result.output)["ok"] is False
