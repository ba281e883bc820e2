"""YAML line maps and atomic writes."""

from __future__ import annotations

import os

import pytest

from pdtrt.errors import SpecError
from pdtrt.yamlio import load_yaml, write_atomic


def test_line_map():
    _, lines = load_yaml("a: 1\nb:\n  c: 2\n  d: [x, y]\n", source="s")
    assert lines.line_of("b.c") == 3
    assert lines.line_of("b.d.1") == 4
    assert lines.line_of("b.missing") == 2  # nearest ancestor


def test_malformed_yaml_has_line():
    with pytest.raises(SpecError) as info:
        load_yaml("a: 1\nb: [1\nc: 2\n", source="s.yaml")
    assert info.value.issues[0].line == 3
    assert "malformed YAML" in info.value.message


def test_write_atomic_replaces_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "f.txt"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert os.listdir(target.parent) == ["f.txt"]


def test_duplicate_key_names_both_lines():
    with pytest.raises(SpecError) as info:
        load_yaml("a: 1\nb:\n  c: 2\n  d: 3\n  c: 4\n", source="s.yaml")
    (issue,) = info.value.issues
    assert (issue.path, issue.line) == ("b.c", 5)
    assert issue.message == "duplicate key 'c': first at line 3, again at line 5"
    assert "s.yaml" in info.value.message


def test_duplicate_keys_reported_together_and_same_name_elsewhere_allowed():
    text = "a: {x: 1}\nb: {x: 2}\na: 3\nl:\n  - {k: 1, k: 2}\n"
    with pytest.raises(SpecError) as info:
        load_yaml(text, source="s.yaml")
    got = [(i.path, i.line) for i in info.value.issues]
    assert got == [("a", 3), ("l.0.k", 5)]
