"""The serving image's recipe: what the base image is documented to hold, plus what pdtrt adds,
is enough for every generated model.py and for ``pdtrt serve``.

The NGC image cannot run here; a venv holding exactly the packages the recipe's data lists --
``provided`` (what the 26.07 image is documented to hold) and ``installed`` (what the Dockerfile
adds) -- stands in for it, with pdtrt on ``PYTHONPATH`` as ``launch.sh`` mounts it. In it,
``pdtrt preflight`` imports every model of the flagship's repositories; the only problem it may
report is the absent TensorRT-LLM. Differences from the image: this machine's Python (3.11, the
image has 3.12) and no TensorRT-LLM, torch or Triton.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pdtrt.enums import Target
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.spec.load import load_deployment
from pdtrt.targets.image import load_image_recipe
from tests.conftest import EXAMPLES, ROOT

_OFFLINE = ("NewConnectionError", "Temporary failure in name resolution",
            "Network is unreachable", "ProxyError")


def _requirements() -> list[str]:
    recipe = load_image_recipe(Target.TRTLLM_1_2)
    return [r.requirement for r in (*recipe.provided, *recipe.installed)]


def test_the_dockerfile_installs_tritonclient_and_the_data_says_why(tmp_path):
    generate_repo(load_deployment(EXAMPLES / "llama3-8b-h100-l40s.yaml"), tmp_path / "repo",
                  mode=RepoMode.POOLS, engines_root=tmp_path / "engines")
    text = (tmp_path / "repo" / "Dockerfile").read_text()
    assert "FROM nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3\n" in text
    assert '"tritonclient[grpc]==2.71.0"' in text
    assert "#   tritonclient[grpc]==2.71.0: the router's gRPC phase client" in text
    recipe = load_image_recipe(Target.TRTLLM_1_2)
    assert all(r.source for r in recipe.provided) and all(r.why for r in recipe.installed)
    assert all("==" in r.requirement for r in recipe.installed)  # pinned


@pytest.fixture(scope="module")
def image_venv(request, tmp_path_factory) -> Path:
    """A venv of the recipe's packages (kept in pytest's cache, keyed by the list; in a
    temporary folder when the cache plugin is off)."""
    reqs = _requirements()
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    cache = getattr(request.config, "cache", None)
    root = Path(cache.mkdir(f"image-venv-{key}")) if cache is not None else \
        tmp_path_factory.mktemp(f"image-venv-{key}")
    python = root / "bin" / "python"
    if not (root / "done").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", *reqs],
                              capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            if any(s in done.stderr for s in _OFFLINE):
                pytest.skip(f"no package index reachable: {done.stderr.strip()[-300:]}")
            pytest.fail(f"the recipe's packages do not install together:\n{done.stderr}")
        (root / "done").write_text("\n".join(reqs) + "\n")
    return python


@pytest.mark.slow
@pytest.mark.parametrize("mode", [RepoMode.BOTH, RepoMode.POOLS], ids=str)
def test_every_generated_model_imports_in_the_image_s_packages(image_venv, mode, tmp_path):
    repo = tmp_path / "repo"
    generate_repo(load_deployment(EXAMPLES / "llama3-8b-h100-l40s.yaml"), repo, mode=mode,
                  engines_root=tmp_path / "engines")
    done = subprocess.run([str(image_venv), "-m", "pdtrt.cli.main", "preflight", str(repo),
                           "--json"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    report = json.loads(done.stdout)
    problems = [c for c in report["checks"] if c["status"] != "ok"]
    # only TensorRT-LLM is missing: every model.py and every late import is there
    assert [c["name"] for c in problems] == ["LLM API"], problems
    assert "tensorrt_llm does not import" in problems[0]["detail"]
    models = {p.parent.parent.name for p in repo.glob("*/1/model.py")}
    assert {c["name"] for c in report["checks"]} >= {f"import {m}" for m in models}
    assert report["versions"]["tritonclient"] == "2.71.0"


@pytest.mark.slow
def test_pdtrt_serve_loads_in_the_image_s_packages(image_venv, tmp_path):
    done = subprocess.run([str(image_venv), "-m", "pdtrt.cli.main", "serve", "--help"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "--tritonserver" in done.stdout
