"""Load a script of benchmarks/ as a module (benchmarks/ is a folder of scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import ROOT


def load_script(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
