"""Every named thread, event loop and lock in pdtrt has a line in the concurrency map.

The map is docs/design/serve.md's "Concurrency map" section; its index table lists each one by
name, kind and package, and this test reads pdtrt's source (``ast``) for:

- threads: ``threading.Thread(name=...)`` (the name; an f-string by its constant start, a name
  that is not a constant by the class that starts it), ``ThreadPoolExecutor(thread_name_prefix=
  ...)``, and subclasses of ``threading.Thread`` (the class);
- event loops: ``asyncio.new_event_loop()`` and ``asyncio.run(...)``, by the function that
  creates them (``Class.method``, nested functions included);
- locks: ``Lock``, ``RLock``, ``Condition``, ``Event``, ``Semaphore`` of ``threading`` or
  ``asyncio``, by ``Class.attribute`` (``self.x = ...``), ``module.NAME`` (module level) or
  ``function.variable`` (a local).

A row matches when its name and kind are the code's and its package is a prefix of the defining
module's package, so code moving between the modules of one package keeps its row. A thread,
loop or lock without a row fails, and so does a row nothing in the code has any more.
"""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT

DOC = ROOT / "docs" / "design" / "serve.md"
SYNC = {"Lock", "RLock", "Condition", "Event", "Semaphore", "BoundedSemaphore"}
Found = tuple[str, str, str]  # (name, kind, module)


def _call_name(node: ast.AST) -> str:
    """``threading.Lock`` / ``Lock`` -> ``Lock``; ``asyncio.run`` -> ``asyncio.run``."""
    if isinstance(node, ast.Attribute):
        base = node.value.id if isinstance(node.value, ast.Name) else ""
        return f"{base}.{node.attr}" if base == "asyncio" and node.attr in (
            "run", "new_event_loop") else node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _thread_name(call: ast.Call, owner: str) -> str:
    for kw in call.keywords:
        if kw.arg in ("name", "thread_name_prefix"):
            if isinstance(kw.value, ast.Constant):
                return kw.value.value
            if isinstance(kw.value, ast.JoinedStr) and isinstance(kw.value.values[0],
                                                                  ast.Constant):
                return kw.value.values[0].value + "*"
            return f"thread of {owner.split('.')[0]}"
    return f"unnamed thread in {owner}"


class _Scan(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module, self.stack, self.found = module, [], set()

    def _scoped(self, node) -> None:
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(_call_name(b) == "Thread" for b in node.bases):
            self.found.add((node.name, "thread", self.module))
        self._scoped(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def _owner(self) -> str:
        return ".".join(self.stack) or self.module.rsplit(".", 1)[1]

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node.func)
        if name in ("Thread", "ThreadPoolExecutor"):
            self.found.add((_thread_name(node, self._owner()), "thread", self.module))
        elif name in ("asyncio.run", "asyncio.new_event_loop"):
            self.found.add((self._owner(), "event loop", self.module))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if isinstance(node.value, ast.Call) and _call_name(node.value.func) in SYNC:
            for target in node.targets:
                if isinstance(target, ast.Attribute):  # self.x: the class's
                    owner = self.stack[0] if self.stack else self._owner()
                    self.found.add((f"{owner}.{target.attr}", "lock", self.module))
                elif isinstance(target, ast.Name):
                    self.found.add((f"{self._owner()}.{target.id}", "lock", self.module))
        self.generic_visit(node)


def in_code() -> set[Found]:
    found: set[Found] = set()
    for path in sorted((ROOT / "pdtrt").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        scan = _Scan(module)
        scan.visit(ast.parse(path.read_text(encoding="utf-8")))
        found |= scan.found
    return found


def in_map() -> set[tuple[str, str, str]]:
    """The index rows: (name, kind, package)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Index of the map"):]
    section = section[:section.index("\n## ")]
    rows = set()
    for line in section.splitlines():
        m = re.fullmatch(r"\| `([^`]+)` \| (thread|event loop|lock) \| `([\w.]+)` \|.*", line)
        if m:
            rows.add((m.group(1), m.group(2), m.group(3)))
    return rows


def _matches(found: Found, row: tuple[str, str, str]) -> bool:
    name, kind, module = found
    return (name, kind) == row[:2] and (module.rsplit(".", 1)[0] + ".").startswith(row[2] + ".")


def test_every_thread_loop_and_lock_has_a_row():
    rows = in_map()
    missing = sorted(f for f in in_code() if not any(_matches(f, r) for r in rows))
    assert not missing, ("add a line to docs/design/serve.md's concurrency map (and its index) "
                         "for: " + "; ".join(f"{k} `{n}` ({m})" for n, k, m in missing))


def test_every_row_is_still_in_the_code():
    found = in_code()
    stale = sorted(r for r in in_map() if not any(_matches(f, r) for f in found))
    assert not stale, f"rows of the concurrency map's index naming nothing in pdtrt: {stale}"


def test_the_scan_finds_what_the_map_is_about():
    # the scan itself: a lock, a named thread and a loop it must see (else both tests above
    # pass on an empty scan)
    found = {(n, k) for n, k, _ in in_code()}
    assert {("KvEventLog._lock", "lock"), ("pdtrt-openai-front", "thread"),
            ("UcxKVNode.start.run", "event loop")} <= found
