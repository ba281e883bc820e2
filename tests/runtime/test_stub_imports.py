"""A Triton stub loads only what it runs.

Each generated ``model.py`` imports one pdtrt model module and the seam; inside Triton that
happens in every stub process, at every (re)load. Measured here in a fresh interpreter with a
stand-in ``triton_python_backend_utils``: which pdtrt modules and which heavy libraries the
import pulls in. The bounds are what the stubs load today (docs/architecture.md); an import
that adds a module to a stub has to raise its bound here, on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pdtrt.blueprint.triton_models import SHIM_MODULES
from pdtrt.engine_io import Role
from tests.conftest import ROOT

# libraries of the CLI, the spec and the build stage: no stub relays a token with them
HEAVY = ("pydantic", "yaml", "click", "rich", "jinja2", "matplotlib")
PROBE = """
import importlib, json, sys, types
sys.modules["triton_python_backend_utils"] = types.ModuleType("triton_python_backend_utils")
importlib.import_module(sys.argv[1])
importlib.import_module("pdtrt.runtime.triton_io")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"pdtrt", *sys.argv[2:]})))
"""


def _loaded(module: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, module, *HEAVY], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout)


# the router: 42 -- its per-request timeline (issue 28), its prefill policy and KV index with
# the block hash (issue 27), it reads PDTRT_FAULT_INJECTION (runtime.faults, envvars) for
# the wedged-loop test of its probe, and it matches stop words as the engines do (stop_words,
# issue 41); then issue 45 gave each of its roles a module (paths, disaggregated, aggregated,
# calls, kv_upkeep, startup, metrics: +7), its gRPC client moved to the shared client/streams
# (+2 with the lazy pdtrt.client package) and the metrics classes left triton_io
# (runtime.metrics, +1); issue 43's in-flight migration (runtime.router.migration, +1);
# issue 47's KV-capacity routing of mixed pools (runtime.router.kv_capacity, +1);
# issue 46's per-request timing returned to the client (runtime.router.timing, +1) and its
# OpenTelemetry settings (pdtrt.tracing_settings, +1: whether tracing is on; the tracing
# modules and OpenTelemetry load only when it is).
# The engine model: 28 -- its KV-events log (issue 27), the check of
# the LLM API it runs on (llmapi.check) and the inputs its sampler would ignore
# (runtime.engine.sampler; both issue 41), runtime.metrics (issue 45), its drain on request
# (runtime.engine.drain, issue 43), its OpenTelemetry settings (pdtrt.tracing_settings, issue
# 46, as the router's). Every stub: +1 for
# pdtrt.ensemble, the ensemble's tables split off engine_io (issue 45: no module over 500
# lines; request parsing names an input by its ensemble name, the text models read theirs)
@pytest.mark.parametrize(("role", "most"), [(Role.ROUTER, 43), (Role.PREFILL, 28),
                                            (Role.DECODE, 28), (Role.AGGREGATED, 28),
                                            (Role.PREPROCESSING, 13), (Role.POSTPROCESSING, 14)])
def test_a_stub_imports_no_heavy_library_and_few_pdtrt_modules(role, most):
    loaded = _loaded(SHIM_MODULES[role])
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert heavy == [], f"{role} stub loads {heavy}"
    ours = [m for m in loaded if m.split(".")[0] == "pdtrt"]
    assert len(ours) <= most, f"{role} stub loads {len(ours)} pdtrt modules: {ours}"


def test_the_package_api_still_works_and_loads_on_first_use():
    import pdtrt

    assert callable(pdtrt.load_deployment) and "load_catalog" in dir(pdtrt)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pdtrt.nope
