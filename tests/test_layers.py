"""The layers between pdtrt's packages are the ones docs/architecture.md draws.

The allowed edges are read from the "Layers" table of docs/architecture.md, so the picture and
the code cannot drift apart: a package edge the table does not allow fails, and so does an
allowed edge no import uses any more, and the table itself has no cycle. The packages that ask
a target use the lookup, never one target's module.
"""

from __future__ import annotations

import re
from collections import defaultdict

from tests.conftest import ROOT
from tests.test_imports import MODULES, cycles, import_graph

DOC = ROOT / "docs" / "architecture.md"
VOCABULARY = "vocabulary"
API = "api"
# what other packages may take from targets: the lookup, the types it hands out, and the
# image recipe (data, not a target)
TARGET_LOOKUP = {"pdtrt.targets.registry", "pdtrt.targets.base", "pdtrt.targets.toolchain",
                 "pdtrt.targets.image"}


def package_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return API
    if len(parts) == 2 and MODULES[module].name != "__init__.py":
        return VOCABULARY
    return parts[1]


def documented_layers() -> dict[str, set[str]]:
    """The table: package -> packages it may import."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Layers"):]
    allowed: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not re.fullmatch(r"`\w+`", cells[0]):
            continue
        package = cells[0].strip("`")
        allowed[package] = set()
        allowed[package].update(re.findall(r"`(\w+)`", cells[1]))
    return allowed


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(package, package) -> the module edges behind it, the vocabulary left out."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in graph.items():
        for target in targets:
            a, b = package_of(module), package_of(target)
            if a != b and b != VOCABULARY:
                edges[(a, b)].append(f"{module} -> {target}")
    return edges


GRAPH = import_graph()
ALLOWED = documented_layers()


def test_the_table_is_read_and_names_every_package():
    assert len(ALLOWED) >= 15 and "targets" in ALLOWED["spec"]
    packages = {package_of(m) for m in MODULES} - {VOCABULARY}
    assert sorted(set(ALLOWED) - packages) == [], "the Layers table lists packages that are gone"
    assert sorted(packages - set(ALLOWED)) == [], "the Layers table misses packages"


def test_the_vocabulary_imports_no_package():
    up = {m: sorted(t for t in GRAPH[m] if package_of(t) != VOCABULARY)
          for m in MODULES if package_of(m) == VOCABULARY}
    assert {m: t for m, t in up.items() if t} == {}


def test_every_package_edge_is_in_the_table_and_every_table_edge_is_used():
    actual = package_edges(GRAPH)
    allowed = {(a, b) for a, bs in ALLOWED.items() for b in bs}
    extra = {edge: actual[edge] for edge in set(actual) - allowed}
    assert extra == {}, "imports docs/architecture.md's Layers table does not allow"
    assert sorted(allowed - set(actual)) == [], \
        "edges in docs/architecture.md's Layers table that no import uses: update the table"


def test_the_table_is_acyclic():
    assert cycles(ALLOWED) == []


def test_the_layer_finder_would_see_an_upward_import():
    graph = {m: set(t) for m, t in GRAPH.items()}
    graph["pdtrt.facts.catalog"].add("pdtrt.serve.launcher")
    assert ("facts", "serve") in package_edges(graph)
    assert "serve" not in ALLOWED["facts"]


def test_other_packages_ask_targets_through_the_lookup_only():
    targets = {m for m in MODULES if package_of(m) == "targets"}
    beyond = {m: sorted(GRAPH[m] & targets - TARGET_LOOKUP)
              for m in MODULES if package_of(m) != "targets"}
    assert {m: t for m, t in beyond.items() if t} == {}
