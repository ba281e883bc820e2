"""One meaning per class name: no two public classes in pdtrt share a name.

Two classes with one name (``Plan`` of the planner and of the reference scheduler, two
``ValidationReport``s, ...) make a reader, a grep and a stack trace guess which is meant. The
names below are the exceptions, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.conftest import ROOT

ALLOWED = {
    "TritonPythonModel": "the class name Triton's Python backend looks up in every model.py",
    "RequestError": "the reference twin keeps tensorrt_llm's own name (llmapi/reference/)",
}


def public_classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "pdtrt").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(ROOT)))
    return found


def test_no_two_public_classes_share_a_name():
    doubled = {name: paths for name, paths in public_classes().items()
               if len(paths) > 1 and name not in ALLOWED}
    assert not doubled, f"rename one of each (the clearer name for the one that moves): {doubled}"


def test_every_exception_is_still_doubled():
    classes = public_classes()
    stale = sorted(name for name in ALLOWED if len(classes.get(name, ())) < 2)
    assert not stale, f"no longer doubled, drop from ALLOWED: {stale}"
