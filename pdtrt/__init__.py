"""pdtrt: prefill/decode disaggregated LLM serving on Triton Inference Server + TensorRT-LLM.

The library returns typed results; ``pdtrt.cli`` renders them. Entry points:

- :func:`load_deployment` / :func:`load_spec` -- read and validate ``pdtrt.yaml``
- :func:`load_catalog` -- the GPU catalog
- :func:`load_model_facts` -- facts of a Hugging Face ``config.json``
- :func:`model_report` / :func:`fit` -- memory fit of a model on a GPU
- :func:`run_doctor` -- what this machine can do
- :func:`plan_build` / :func:`run_build` -- engine builds; :func:`check_engines` -- compatibility
"""

from pdtrt.build.check import check_engines
from pdtrt.build.plan import plan_build
from pdtrt.build.run import run_build
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.doctor import run_doctor
from pdtrt.facts.memory import fit
from pdtrt.facts.model import load_model_facts
from pdtrt.facts.report import model_report
from pdtrt.spec.load import load_deployment, load_spec
from pdtrt.version import __version__

__all__ = [
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
