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
