"""The generated trtllm-1.2 repositories load and stream on the real Triton 2.51, two servers.

TensorRT-LLM needs GPUs, so the LLM-API engine model imports pdtrt's CPU reference of the LLM
API instead (:func:`pdtrt.llmapi.load_llm_api`: the only seam swapped). The repositories are
the ones ``pdtrt repo`` writes for ``docs/examples/llama3-8b-h100-l40s.yaml`` --
``--mode pools`` (the L40S host's decode server) and ``--mode both`` (the H100 host's ensembles,
router, prefill, aggregated) -- with the options files ``pdtrt build`` writes for it (no GPU
needed), and they are served as written: the model is the snapshot ``pdtrt build`` resolved
with ``HF_HUB_OFFLINE=1`` in a Hub cache (``HF_HUB_CACHE``) that holds the reference checkpoint
under the example's (old) Hub name, which the engine models (the LLM, the engine limits) and
the tokenizer models load by path -- as a GPU host loads it from the cache folder ``launch.sh``
mounts. Only the router's decode address changes (it names the pools server), and the UCX
transports (RDMA/GPU ones in the example) become ``tcp`` on this CPU machine.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from pdtrt.builder.plan import plan_build
from pdtrt.builder.run import run_build
from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.engine_io import Param
from pdtrt.facts.embedded_triton import find_embedded_triton
from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.validate import validate_repo
from pdtrt.serve.triton_server import ServerConfig, TritonServer
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES, start_server

pytestmark = [pytest.mark.triton, pytest.mark.slow]

SPEC = EXAMPLES / "llama3-8b-h100-l40s.yaml"
DECODE_URL = "l40s-host:8001"  # the example's decode.endpoint


def _set(config: Path, key: str, value: str) -> None:
    """Replace the string value of parameter ``key`` in ``config`` (it must be there)."""
    text = config.read_text()
    pattern = re.compile(f'(key: "{re.escape(key)}"' + r'\n\s*value: \{ string_value: ")[^"]*(")')
    new, count = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
    assert count == 1, f"{config}: no parameter {key}"
    config.write_text(new)


def hub_cache(root: Path, name: str, checkpoint: Path, tokenizer: Path) -> Path:
    """A Hugging Face Hub cache (``HF_HUB_CACHE`` layout) holding ``checkpoint`` and
    ``tokenizer``'s files as revision main of model ``name``."""
    repo = root / f"models--{name.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for source in (checkpoint, tokenizer):
        for f in source.iterdir():
            if f.is_file():
                shutil.copy2(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return root


def _started(repo: Path, workdir: Path, cache: Path) -> TritonServer:
    """A started server for ``repo`` (retried like every test server: tests/conftest.py)."""
    workdir.mkdir(exist_ok=True)
    env = {"UCX_TLS": "tcp", "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    return start_server(ServerConfig(repository=repo, log_path=workdir / "server.log",
                                     env=env, backend_dir=workdir / "backends"),
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
    assert dep.spec.model.path is None  # loaded by its Hub name
    cache = hub_cache(work / "hub", dep.spec.model.name, reference / "prefill",
                      reference / "tokenizer")
    engines = work / "engines"
    with pytest.MonkeyPatch.context() as env:  # the snapshot from the cache, no Hub
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("HF_HUB_CACHE", str(cache))
        run_build(plan_build(dep, engines_root=engines), dep)  # no GPU needed
    record = json.loads((engines / dep.spec.name / "weights/weights.json").read_text())
    assert record["repo_id"] == dep.spec.model.name  # found under the name before the rename
    snapshot = record["snapshot"]
    pools = generate_repo(dep, work / "pools", mode=RepoMode.POOLS, engines_root=engines).out
    front = generate_repo(dep, work / "front", mode=RepoMode.BOTH, engines_root=engines).out
    assert validate_repo(pools).problems == () and validate_repo(front).problems == ()
    for model in ("prefill", "decode", "aggregated", "preprocessing"):
        config = (pools if model == "decode" else front) / model / "config.pbtxt"
        assert f'string_value: "{snapshot}"' in config.read_text()
    pools_server = _started(pools, work / "pools-run", cache)
    try:
        assert pools_server.endpoints is not None
        _set(front / "router" / "config.pbtxt", Param.DECODE_URL,
             pools_server.endpoints.grpc_url)
        front_server = _started(front, work / "front-run", cache)
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


def test_the_checkpoint_of_a_hub_name_is_the_one_in_the_cache(tmp_path, reference_engines):
    """What the servers above read for the example's Hub name: the cache's config, not a path
    relative to the working directory (the 1.2 example crashed at load that way)."""
    import huggingface_hub.constants as hub_constants

    from pdtrt.runtime.engine.config import checkpoint_config

    root, _ = reference_engines
    name = load_deployment(SPEC).spec.model.name
    cache = hub_cache(tmp_path / "hub", name, root / "reference-cpu" / "prefill",
                      root / "reference-cpu" / "tokenizer")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
        mp.setattr(hub_constants, "HF_HUB_OFFLINE", True)
        mp.chdir(tmp_path)
        got = checkpoint_config(Path(name))
    assert got["vocab_size"] == json.loads(
        (root / "reference-cpu" / "prefill" / "config.json").read_text())["vocab_size"]
