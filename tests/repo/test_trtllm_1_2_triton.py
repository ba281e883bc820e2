"""The generated trtllm-1.2 repositories load and stream on the real Triton 2.51, two servers.

TensorRT-LLM needs GPUs, so the LLM-API engine model imports pdtrt's CPU reference of the LLM
API instead (:func:`pdtrt.llmapi.load_llm_api`: the only seam swapped). The repositories are
the ones ``pdtrt repo`` writes for ``docs/examples/llama3-8b-h100-l40s-trtllm-1.2.yaml`` --
``--mode pools`` (the L40S host's decode server) and ``--mode both`` (the H100 host's ensembles,
router, prefill, aggregated) -- with the options files ``pdtrt build`` writes for it (no GPU
needed). Only values that name this machine change: ``llm_model`` points at the reference
checkpoint (the example's is Llama-3.1-8B), the tokenizer at the reference tokenizer, and the
router's decode address at the pools server. Their UCX variables name RDMA/GPU transports and
are replaced by ``tcp`` on this CPU machine.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from pdtrt.build.plan import plan_build
from pdtrt.build.run import run_build
from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.engine_io import Param
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.serve.triton_server import ServerConfig, TritonServer
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES, start_server

pytestmark = [pytest.mark.triton, pytest.mark.slow]

SPEC = EXAMPLES / "llama3-8b-h100-l40s-trtllm-1.2.yaml"
DECODE_URL = "l40s-host:8001"  # the example's decode.endpoint


def _set(config: Path, key: str, value: str) -> None:
    """Replace the string value of parameter ``key`` in ``config`` (it must be there)."""
    text = config.read_text()
    pattern = re.compile(f'(key: "{re.escape(key)}"' + r'\n\s*value: \{ string_value: ")[^"]*(")')
    new, count = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
    assert count == 1, f"{config}: no parameter {key}"
    config.write_text(new)


def _pointed(repo: Path, reference: Path) -> Path:
    """The values that name this machine: the checkpoint, the tokenizer."""
    for model in ("prefill", "decode", "aggregated"):
        if (repo / model).is_dir():
            phase = "decode" if model == "decode" else "prefill"
            _set(repo / model / "config.pbtxt", Param.LLM_MODEL, str(reference / phase))
    for model in ("preprocessing", "postprocessing"):
        if (repo / model).is_dir():
            _set(repo / model / "config.pbtxt", Param.TOKENIZER_DIR, str(reference / "tokenizer"))
    return repo


def _started(repo: Path, workdir: Path) -> TritonServer:
    """A started server for ``repo`` (retried like every test server: tests/conftest.py)."""
    workdir.mkdir(exist_ok=True)
    return start_server(ServerConfig(repository=repo, log_path=workdir / "server.log",
                                     env={"UCX_TLS": "tcp"}, backend_dir=workdir / "backends"),
                        timeout_s=600)


@pytest.fixture(scope="module")
def served(reference_engines, tmp_path_factory):
    """The pools server, then the front whose router calls it: the front's gRPC URL."""
    if find_embedded_triton() is None or importlib.util.find_spec("ucxx") is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton) and ucxx")
    root, _ = reference_engines
    reference = root / "reference-cpu"
    work = tmp_path_factory.mktemp("trtllm12")
    dep = load_deployment(SPEC)
    engines = work / "engines"
    run_build(plan_build(dep, engines_root=engines), dep)  # the options files: no GPU needed
    pools = _pointed(generate_repo(dep, work / "pools", mode=RepoMode.POOLS,
                                   engines_root=engines).out, reference)
    front = _pointed(generate_repo(dep, work / "front", mode=RepoMode.BOTH,
                                   engines_root=engines).out, reference)
    assert validate_repo(pools).problems == () and validate_repo(front).problems == ()
    pools_server = _started(pools, work / "pools-run")
    try:
        assert pools_server.endpoints is not None
        _set(front / "router" / "config.pbtxt", Param.DECODE_URL,
             pools_server.endpoints.grpc_url)
        front_server = _started(front, work / "front-run")
        try:
            assert front_server.endpoints is not None
            yield front_server.endpoints.grpc_url
        finally:
            front_server.stop()
    finally:
        pools_server.stop()


def _generate(url: str, model: str) -> str:
    with LLMClient(url) as client:
        request = GenerateRequest(prompt="The quick brown fox", max_tokens=12, temperature=0.0)
        result = client.generate(request, model=model).raise_for_error()
    assert result.num_chunks >= 2, "not streamed"
    return result.text


def test_the_generated_repositories_load_and_stream_across_two_servers(served):
    disaggregated = _generate(served, "ensemble")
    assert disaggregated
    assert _generate(served, "ensemble_aggregated") == disaggregated


def test_only_machine_values_differ(tmp_path, reference_engines):
    root, _ = reference_engines
    dep = load_deployment(SPEC)
    plain = generate_repo(dep, tmp_path / "plain", mode=RepoMode.BOTH,
                          engines_root=tmp_path / "e").out
    pointed = _pointed(generate_repo(dep, tmp_path / "pointed", mode=RepoMode.BOTH,
                                     engines_root=tmp_path / "e").out, root / "reference-cpu")
    changed = {}
    for config in plain.glob("*/config.pbtxt"):
        after = (pointed / config.parent.name / "config.pbtxt").read_text().splitlines()
        diff = [a for a, b in zip(config.read_text().splitlines(), after, strict=True) if a != b]
        if diff:
            changed[config.parent.name] = len(diff)
    assert changed == {"prefill": 1, "aggregated": 1, "preprocessing": 1, "postprocessing": 1}
    assert DECODE_URL in (plain / "router" / "config.pbtxt").read_text()
