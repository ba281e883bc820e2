"""The one trace reader: JSONL and CSV, the fields, every error with its file and line."""

from __future__ import annotations

import pytest

from pdtrt.errors import WorkloadError
from pdtrt.workload import TraceEntry, read_trace


def test_jsonl_prompts_lengths_and_times(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt": "a b c", "max_tokens": 5}\n\n{"isl": 300, "osl": 20}\n'
                    '{"prompt": "d", "isl": 7}\n')
    assert read_trace(path) == (TraceEntry(prompt="a b c", osl=5), TraceEntry(isl=300, osl=20),
                                TraceEntry(prompt="d", isl=7))
    path.write_text('{"arrival_s": 1.5, "isl": 100, "osl": 10}\n{"arrival_s": 0, "isl": 2}\n')
    assert read_trace(path) == (TraceEntry(arrival_s=1.5, isl=100, osl=10),
                                TraceEntry(arrival_s=0.0, isl=2))


def test_other_fields_are_ignored_but_near_misses_are_errors(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "c1", "user": 7, "prompt": "a b", "max_tokens": 3}\n')
    assert read_trace(path) == (TraceEntry(prompt="a b", osl=3),)
    path.write_text('{"promt": "a b", "isl": 2}\n')
    with pytest.raises(WorkloadError, match=r"unknown field 'promt' \(did you mean 'prompt'"):
        read_trace(path)
    path.write_text('{"conversation": 7, "isl": 2}\n')  # would make turns single requests
    with pytest.raises(WorkloadError, match=r"did you mean 'conversation_id'"):
        read_trace(path)


def test_conversations_turns_and_think_times(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"conversation_id": 3, "turn": 1, "think_s": 2.5, "prompt": "b"}\n'
                    '{"conversation_id": "x", "prompt": "a"}\n')
    assert read_trace(path) == (
        TraceEntry(conversation_id="3", turn=1, think_s=2.5, prompt="b"),
        TraceEntry(conversation_id="x", prompt="a"))
    for text, match in (
            ('{"conversation_id": 3, "isl": 2}\n{"isl": 2}\n', "'conversation_id' is on 1 of 2"),
            ('{"turn": 1, "isl": 2}\n', "add its 'conversation_id'"),
            ('{"conversation_id": 1, "turn": -1, "isl": 2}\n', "'turn' must be an integer >= 0"),
            ('{"conversation_id": 1, "think_s": -1, "isl": 2}\n', "'think_s' must be a number"),
            ('{"conversation_id": 1, "turn": 0, "isl": 2}\n'
             '{"conversation_id": 1, "turn": 0, "isl": 3}\n', "conversation '1' has turn 0 twice"),
            ('{"conversation_id": true, "isl": 2}\n', "'conversation_id' must be")):
        path.write_text(text)
        with pytest.raises(WorkloadError, match=match):
            read_trace(path)


def test_csv_reads_the_same_fields(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,isl,osl\n1.5,100,10\n0.5,200,\n")
    assert read_trace(path) == (TraceEntry(arrival_s=1.5, isl=100, osl=10),
                                TraceEntry(arrival_s=0.5, isl=200))


@pytest.mark.parametrize(("name", "text", "match"), [
    ("t.jsonl", "not json\n", r"t.jsonl:1: not JSON"),
    ("t.jsonl", "[1, 2]\n", r"t.jsonl:1: not a JSON object"),
    ("t.jsonl", '{"prompt": "ok"}\n{"max_tokens": 3}\n',
     r"t.jsonl:2: needs a non-empty string 'prompt' or an integer 'isl'"),
    ("t.jsonl", '{"prompt": "  "}\n', "'prompt' must be a non-empty string"),
    ("t.jsonl", '{"prompt": "x", "max_tokens": 0}\n', "'max_tokens' must be an integer >= 1"),
    ("t.jsonl", '{"isl": true}\n', "'isl' must be an integer >= 1"),
    ("t.jsonl", '{"isl": 2.5}\n', "'isl' must be an integer >= 1"),
    ("t.jsonl", '{"isl": 3, "osl": 2, "max_tokens": 2}\n', "'osl' or its alias 'max_tokens'"),
    ("t.jsonl", '{"isl": 3, "arrival_s": -1}\n', "'arrival_s' must be a number >= 0"),
    ("t.jsonl", '{"isl": 3, "arival_s": 1}\n', r"unknown field 'arival_s' \(did you mean "
     r"'arrival_s'\?\)"),
    ("t.jsonl", '{"isl": 3, "arrival_s": 1}\n{"isl": 4}\n', "'arrival_s' is on 1 of 2"),
    ("t.jsonl", "\n", "has no requests"),
    ("t.csv", "arrival_s,isl,osl\nsoon,100,10\n", r"t.csv:2: 'arrival_s' must be a number"),
    ("t.csv", "arrival_s,isl,osl\n1,many,10\n", r"t.csv:2: 'isl' must be an integer"),
    ("t.csv", "arrival_s,isl,osl\n", "has no requests"),
], ids=["not-json", "not-object", "no-prompt-no-isl", "blank-prompt", "zero-max-tokens",
        "bool-isl", "float-isl", "osl-and-alias", "negative-time", "typo", "some-timed",
        "empty", "csv-bad-time", "csv-bad-isl", "csv-empty"])
def test_bad_traces(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(WorkloadError, match=match):
        read_trace(path)


def test_unreadable_trace(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read the trace"):
        read_trace(tmp_path / "missing.jsonl")
