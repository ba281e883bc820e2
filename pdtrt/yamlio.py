"""Reading YAML with line numbers, and writing files atomically.

Spec errors name the YAML path *and* the line it sits on, so the loader keeps a map from dotted
paths (``prefill.engine.max_seq_len``) to 1-based line numbers. A key given twice in one mapping
is refused with both lines: PyYAML keeps the last value silently, so an edit made to the first
copy would be lost without a word. Files pdtrt writes never appear half-written: text goes to a
temporary file in the same directory, then ``os.replace``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from pdtrt.errors import SpecError, SpecIssue

__all__ = ["LineMap", "load_yaml", "write_atomic"]


class LineMap:
    """Dotted YAML path -> 1-based line number of that key (or list item)."""

    def __init__(self, lines: dict[str, int]) -> None:
        self._lines = lines

    def line_of(self, path: str) -> int | None:
        """Line of ``path``, or of its nearest ancestor that is in the file."""
        parts = path.split(".") if path else []
        while parts:
            line = self._lines.get(".".join(parts))
            if line is not None:
                return line
            parts.pop()
        return self._lines.get("")


def _index(node: yaml.Node, prefix: str, out: dict[str, int], dups: list[SpecIssue]) -> None:
    """Fill ``out`` with each path's line; append one issue per key repeated in a mapping."""
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            path = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and path in first_line:
                dups.append(SpecIssue(
                    path=path,
                    line=line,
                    message=f"duplicate key {key_node.value!r}: first at line "
                    f"{first_line[path]}, again at line {line}",
                ))
            else:
                first_line[path] = line
            out[path] = line
            _index(value_node, path, out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = f"{prefix}.{i}" if prefix else str(i)
            out[path] = item.start_mark.line + 1
            _index(item, path, out, dups)


def load_yaml(text: str, *, source: str) -> tuple[Any, LineMap]:
    """Parse YAML text.

    Raises :class:`SpecError` for malformed YAML (with the line of the fault) and for a key
    repeated within one mapping (with the lines of both copies).
    """
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            [SpecIssue(path="", line=line, message=f"malformed YAML: {problem}")],
            source=source,
            hint="fix the YAML syntax at that line (indentation, a missing ':' or quote)",
        ) from None
    lines: dict[str, int] = {}
    dups: list[SpecIssue] = []
    if node is not None:
        lines[""] = node.start_mark.line + 1
        _index(node, "", lines, dups)
    if dups:
        raise SpecError(
            dups, source=source, hint="keep one copy of each key: YAML keeps only the last one"
        )
    return data, LineMap(lines)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old file or the whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
