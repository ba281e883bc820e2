"""No import cycles inside pdtrt: a walk of every module's imports (AST, nothing imported).

Every ``import``/``from ... import`` of a pdtrt module counts -- at module level, inside
functions (a deferred import that closes a loop is still a loop between concepts) and under
``if TYPE_CHECKING:`` (a loop of types is a loop of concepts too; a module that needs a type
of its caller declares a Protocol instead). ``from pdtrt.a import b`` is an edge to
``pdtrt.a.b`` when that is a module, else to ``pdtrt.a`` (its ``__init__``).
The layers between packages are ``tests/test_layers.py``'s business.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "pdtrt"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "pdtrt")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] == "pdtrt":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name, path in MODULES.items():
        targets = _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[name] = {t for t in targets if t in MODULES and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def test_the_walk_sees_the_package():
    graph = import_graph()
    assert len(graph) > 50 and "pdtrt.spec.load" in graph
    assert "pdtrt.errors" in graph["pdtrt.spec.load"]  # a known edge: the walk works


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_pdtrt_has_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)
