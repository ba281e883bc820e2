"""pdtrt: prefill/decode disaggregated LLM serving on Triton Inference Server + TensorRT-LLM.

The library returns typed results; ``pdtrt.cli`` renders them. Entry points:

- :func:`load_deployment` / :func:`load_spec` -- read and validate ``pdtrt.yaml``
- :func:`load_catalog` -- the GPU catalog
- :func:`load_model_facts` -- facts of a Hugging Face ``config.json``
- :func:`model_report` / :func:`fit` -- memory fit of a model on a GPU
- :func:`run_doctor` -- what this machine can do
- :func:`plan_build` / :func:`run_build` -- engine builds; :func:`check_engines` -- compatibility
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from pdtrt.version import __version__

# Loaded on first use (PEP 562): a Triton stub that imports pdtrt.runtime to relay tokens must
# not pull in the spec, build and facts stacks (pydantic, yaml, ...) through this package.
_LAZY = {
    "check_engines": "pdtrt.builder.check",
    "fit": "pdtrt.facts.memory",
    "load_catalog": "pdtrt.facts.catalog",
    "load_deployment": "pdtrt.spec.load",
    "load_model_facts": "pdtrt.facts.model",
    "load_spec": "pdtrt.spec.load",
    "model_report": "pdtrt.facts.report",
    "plan_build": "pdtrt.builder.plan",
    "run_build": "pdtrt.builder.run",
    "run_doctor": "pdtrt.facts.doctor",
}

if TYPE_CHECKING:
    from pdtrt.builder.check import check_engines
    from pdtrt.builder.plan import plan_build
    from pdtrt.builder.run import run_build
    from pdtrt.facts.catalog import load_catalog
    from pdtrt.facts.doctor import run_doctor
    from pdtrt.facts.memory import fit
    from pdtrt.facts.model import load_model_facts
    from pdtrt.facts.report import model_report
    from pdtrt.spec.load import load_deployment, load_spec


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'pdtrt' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [  # the public API: what _LAZY loads, and the version
    "__version__",
    "check_engines",
    "fit",
    "load_catalog",
    "load_deployment",
    "load_model_facts",
    "load_spec",
    "model_report",
    "plan_build",
    "run_build",
    "run_doctor",
]
