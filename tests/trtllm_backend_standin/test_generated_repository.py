"""The generated trtllm-0.21 repository loads and streams on the real Triton 2.51.

NVIDIA's ``tensorrtllm`` backend needs GPUs, so the test's backend directory holds a stand-in
(``tensorrtllm/model.py``, run by Triton's Python backend) that reads every parameter the way the
C++ backend does -- from pdtrt's contract data -- and serves the 0.21 request contract with the
reference engine. The repository is the one ``pdtrt repo`` writes for
``docs/examples/llama3-8b-h100-l40s-trtllm-0.21.yaml`` (``--mode both``); only paths change: the
engine directories point at the reference checkpoints, the tokenizer at the reference tokenizer. The
server gets the TensorRT-LLM variables of the generated ``pdtrt.env`` (orchestrator mode without
spawning, which makes ``participant_ids`` required); its UCX variables name GPU transports and
are left out on this CPU machine.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.errors import ServerError
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.serve.triton_server import ServerConfig, TritonServer
from pdtrt.spec.load import load_deployment
from pdtrt.targets.trtllm_backend import load_backend_contract
from tests.conftest import EXAMPLES

pytestmark = [pytest.mark.triton, pytest.mark.slow]

STANDIN = Path(__file__).resolve().parent / "tensorrtllm" / "model.py"
SPEC = EXAMPLES / "llama3-8b-h100-l40s-trtllm-0.21.yaml"
ENGINE_MODELS = ("prefill", "decode", "aggregated")
REQUIRED = load_backend_contract().required


def generated_repository(out: Path, reference_root: Path) -> Path:
    """``pdtrt repo SPEC --mode both`` with only its paths pointed at the reference build."""
    dep = load_deployment(SPEC)
    engines = out.parent / "engines-not-built"
    generate_repo(dep, out, mode=RepoMode.BOTH, engines_root=engines)
    ref = reference_root / "reference-cpu"
    paths = {f"{engines}/{dep.spec.name}/{phase}": f"{ref}/{phase}"
             for phase in ("prefill", "decode")}
    paths[dep.spec.model.name] = str(ref / "tokenizer")  # the tokenizer_dir of pre/post
    for config in out.glob("*/config.pbtxt"):
        text = config.read_text()
        for old, new in paths.items():
            text = text.replace(f'string_value: "{old}"', f'string_value: "{new}"')
        config.write_text(text)
    return out


def _backend_dir(dest: Path) -> Path:
    """Triton's Python backend (copied: a Python-based backend refuses a symlinked library
    outside the backend directory) and the stand-in as the ``tensorrtllm`` backend."""
    triton = find_embedded_triton()
    if triton is None or triton.missing_parts():
        pytest.skip("the embedded Triton server (nvidia-pytriton) is not installed")
    (dest / "python").mkdir(parents=True)
    for part in (triton.python_backend_dir / "libtriton_python.so",
                 triton.python_backend_dir / "triton_python_backend_utils.py",
                 triton.python_stub):
        shutil.copy(part, dest / "python" / part.name)
    (dest / "tensorrtllm").mkdir()
    shutil.copy(STANDIN, dest / "tensorrtllm" / "model.py")
    return dest


def _server(repo: Path, env_file: Path, workdir: Path) -> TritonServer:
    triton = find_embedded_triton()
    assert triton is not None
    env = {"LD_LIBRARY_PATH": str(triton.library_dir),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for line in env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.startswith("TRTLLM_"):
            env[key] = value
    backends = _backend_dir(workdir / "backends")
    return TritonServer(ServerConfig(
        repository=repo, log_path=workdir / "server.log", tritonserver=triton.tritonserver,
        env=env, extra_args=(f"--backend-directory={backends}",)))


@pytest.fixture(scope="module")
def served(reference_engines, tmp_path_factory):
    """The generated repository in one server for the module: its gRPC URL."""
    root, _ = reference_engines
    workdir = tmp_path_factory.mktemp("standin")
    repo = generated_repository(workdir / "repo", root)
    server = _server(repo, repo / "pdtrt.env", workdir)
    server.start(timeout_s=420)
    try:
        assert server.endpoints is not None
        yield server.endpoints.grpc_url
    finally:
        server.stop()


def _generate(url: str, model: str, **kwargs: object) -> str:
    with LLMClient(url) as client:
        request = GenerateRequest(prompt="The quick brown fox", max_tokens=12, **kwargs)
        result = client.generate(request, model=model).raise_for_error()
    assert result.num_chunks >= 2, "not streamed"
    return result.text


def test_only_paths_differ_from_the_generated_repository(reference_engines, tmp_path):
    root, _ = reference_engines
    plain = tmp_path / "plain"
    generate_repo(load_deployment(SPEC), plain, mode=RepoMode.BOTH,
                  engines_root=tmp_path / "engines-not-built")
    pointed = generated_repository(tmp_path / "repo", root)
    for config in plain.glob("*/config.pbtxt"):
        before = config.read_text().splitlines()
        after = (pointed / config.parent.name / "config.pbtxt").read_text().splitlines()
        changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
        assert all(a.strip().startswith("value: { string_value: \"") for a, _ in changed)
        assert len(changed) == (1 if config.parent.name in (*ENGINE_MODELS, "preprocessing",
                                                             "postprocessing") else 0)


def test_generated_repository_loads_and_streams(served):
    greedy = {"temperature": 0.0}
    disaggregated = _generate(served, "ensemble", **greedy)
    assert disaggregated
    assert _generate(served, "ensemble_aggregated", **greedy) == disaggregated


def test_the_seed_reaches_the_0_21_engine_as_seed(served):
    """The ensemble's ``random_seed`` is mapped to 0.21's ``seed``: a dropped seed would make
    every seeded sample equal to the unseeded one."""
    sampled = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    first = _generate(served, "ensemble_aggregated", seed=1, **sampled)
    assert _generate(served, "ensemble_aggregated", seed=1, **sampled) == first
    assert _generate(served, "ensemble_aggregated", seed=2, **sampled) != first


@pytest.mark.parametrize("parameter", REQUIRED)
def test_a_missing_required_parameter_fails_the_load_and_validate(parameter, reference_engines,
                                                                   tmp_path):
    """Each required parameter, removed from one generated engine model (round robin over the
    three): Triton does not load the model and names it, and `repo validate` reports it."""
    model = ENGINE_MODELS[REQUIRED.index(parameter) % len(ENGINE_MODELS)]
    root, _ = reference_engines
    full = generated_repository(tmp_path / "full", root)
    config = full / model / "config.pbtxt"
    lines = config.read_text().splitlines(keepends=True)
    at = lines.index(f'  key: "{parameter}"\n')
    config.write_text("".join(lines[:at - 1] + lines[at + 3:]))  # the whole parameters block
    report = validate_repo(full)
    assert [p for p in report.problems if p.startswith(f"{model}: parameter '{parameter}' is "
                                                       "missing")], report.problems
    alone = tmp_path / "alone"  # the one model, so the server fails fast
    shutil.copytree(full / model, alone / model)
    server = _server(alone, full / "pdtrt.env", tmp_path)
    with pytest.raises(ServerError) as failed:
        server.start(timeout_s=300)
    expected = (load_backend_contract().messages.no_engine if parameter == "gpt_model_path"
                else f"Cannot find parameter with name: {parameter}")
    assert f"model '{model}' failed to load" in str(failed.value)
    assert expected in str(failed.value)


def test_a_seeded_request_through_the_router(served):
    """The router renames the client's random_seed / min_length to 0.21's seed / min_tokens
    (the router's phase_input_names), which the phase models declare."""
    seeded = {"seed": 1, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    assert _generate(served, "ensemble", **seeded) == \
        _generate(served, "ensemble_aggregated", **seeded)
