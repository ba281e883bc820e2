"""Trace files: recorded or hand-written requests, one reader for bench and the simulator.

A trace is JSONL -- one object per line, blank lines ignored -- or, for a ``.csv`` file, a CSV
whose header names the same fields (an empty cell is an absent field):

- ``prompt``: the prompt text (``pdtrt bench`` sends it);
- ``isl``: prompt tokens (when there is no prompt; with one, bench counts the prompt's tokens
  and the simulator takes ``isl`` as given, else counts the prompt's words);
- ``osl`` (or its alias ``max_tokens``): output tokens; absent, it is drawn from ``--osl``;
- ``arrival_s``: seconds from the start of the trace; ``pdtrt simulate --trace`` replays these
  times when no ``--rate`` / ``--concurrency`` is given. ``pdtrt bench`` sends on its own
  schedule and uses a trace for its prompts and lengths only;
- ``conversation_id`` (a string or an integer), ``turn`` (an integer >= 0: the order within
  the conversation, else file order) and ``think_s`` (seconds the user waits after the previous
  turn's answer before sending this one): multi-turn chats. ``pdtrt bench`` sends each turn
  with the conversation so far -- earlier turns' prompts and answers -- before its own prompt
  (:mod:`pdtrt.bench.conversations`).

Every entry needs a ``prompt`` or an ``isl``; ``arrival_s`` is given on every entry or on none,
and so is ``conversation_id``; ``turn`` and ``think_s`` need a ``conversation_id``.
Other fields are ignored -- real traces carry ids, timestamps, user ids -- unless a
field's name is close to one of these (``promt``, ``max_token``): a typo that would silently
drop a value is an error with "did you mean". This module
reads and checks; it does not decide which entry request *i* gets
(:mod:`pdtrt.workload.request_mix`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pdtrt.errors import WorkloadError
from pdtrt.suggest import did_you_mean

__all__ = ["TRACE_FIELDS", "TraceEntry", "read_trace"]

TRACE_FIELDS = ("prompt", "isl", "osl", "max_tokens", "arrival_s", "conversation_id", "turn",
                "think_s")
_HINT = ('one object per line, e.g. {"prompt": "...", "max_tokens": 64} or '
         '{"arrival_s": 0.5, "isl": 3000, "osl": 500}')


@dataclass(frozen=True, kw_only=True)
class TraceEntry:
    """One request of a trace; None means "not given"."""

    prompt: str | None = None
    isl: int | None = None
    osl: int | None = None
    arrival_s: float | None = None
    conversation_id: str | None = None
    turn: int | None = None
    think_s: float | None = None


def _tokens(value: object, key: str, where: str) -> int:
    if isinstance(value, str):  # a CSV cell
        try:
            value = int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkloadError(f"{where}: '{key}' must be an integer >= 1, got {value!r}",
                            hint=_HINT)
    return value


def _seconds(value: object, where: str, key: str = "arrival_s") -> float:
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan  # type: ignore
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise WorkloadError(f"{where}: '{key}' must be a number >= 0, got {value!r}",
                            hint=_HINT)
    return seconds


def _conversation(value: object, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or not str(value).strip():
        raise WorkloadError(f"{where}: 'conversation_id' must be a non-empty string or an "
                            f"integer, got {value!r}", hint=_HINT)
    return str(value)


def _turn(value: object, where: str) -> int:
    if isinstance(value, str) and value.isdigit():  # a CSV cell
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkloadError(f"{where}: 'turn' must be an integer >= 0, got {value!r}",
                            hint=_HINT)
    return value


def _entry(fields: Mapping[str, object], where: str) -> TraceEntry:
    """One entry from its fields (JSON values or CSV cells); raises WorkloadError."""
    for key in fields:
        suggestion = "" if key in TRACE_FIELDS else did_you_mean(key, TRACE_FIELDS)
        if suggestion:  # a misspelt field would be dropped silently
            raise WorkloadError(f"{where}: unknown field '{key}'{suggestion}", hint=_HINT)
    fields = {k: v for k, v in fields.items() if k in TRACE_FIELDS}
    prompt = fields.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
        raise WorkloadError(f"{where}: 'prompt' must be a non-empty string", hint=_HINT)
    if "osl" in fields and "max_tokens" in fields:
        raise WorkloadError(f"{where}: give 'osl' or its alias 'max_tokens', not both")
    out_key = "osl" if "osl" in fields else "max_tokens"
    entry = TraceEntry(
        prompt=prompt,
        isl=_tokens(fields["isl"], "isl", where) if "isl" in fields else None,
        osl=_tokens(fields[out_key], out_key, where) if out_key in fields else None,
        arrival_s=_seconds(fields["arrival_s"], where) if "arrival_s" in fields else None,
        conversation_id=_conversation(fields["conversation_id"], where)
        if "conversation_id" in fields else None,
        turn=_turn(fields["turn"], where) if "turn" in fields else None,
        think_s=_seconds(fields["think_s"], where, "think_s") if "think_s" in fields else None)
    if entry.prompt is None and entry.isl is None:
        raise WorkloadError(f"{where}: needs a non-empty string 'prompt' or an integer 'isl'",
                            hint=_HINT)
    if entry.conversation_id is None and (entry.turn is not None or entry.think_s is not None):
        raise WorkloadError(f"{where}: 'turn' and 'think_s' belong to a conversation: add its "
                            "'conversation_id'", hint=_HINT)
    return entry


def _jsonl(path: Path, text: str) -> list[TraceEntry]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}:{number}: not JSON: {exc.msg}", hint=_HINT) from None
        if not isinstance(obj, dict):
            raise WorkloadError(f"{path}:{number}: not a JSON object", hint=_HINT)
        entries.append(_entry(obj, f"{path}:{number}"))
    return entries


def _csv(path: Path, text: str) -> list[TraceEntry]:
    rows = csv.DictReader(text.splitlines())
    return [_entry({k: v for k, v in row.items() if v not in (None, "")}, f"{path}:{number}")
            for number, row in enumerate(rows, start=2)]


def read_trace(path: Path) -> tuple[TraceEntry, ...]:
    """The entries of a JSONL (or ``.csv``) trace, in file order. Raises WorkloadError naming
    the file and line of a bad entry, an unreadable or empty file, or ``arrival_s`` on some
    entries only."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"cannot read the trace {path}: {exc.strerror}") from None
    entries = _csv(path, text) if path.suffix.lower() == ".csv" else _jsonl(path, text)
    if not entries:
        raise WorkloadError(f"the trace {path} has no requests", hint=_HINT)
    for key in ("arrival_s", "conversation_id"):
        given = [getattr(e, key) is not None for e in entries]
        if any(given) and not all(given):
            raise WorkloadError(f"{path}: '{key}' is on {sum(given)} of {len(entries)} "
                                "entries; give it on every entry or on none")
    turns = [(e.conversation_id, e.turn) for e in entries if e.turn is not None]
    if len(set(turns)) != len(turns):
        twice = next(t for t in turns if turns.count(t) > 1)
        raise WorkloadError(f"{path}: conversation '{twice[0]}' has turn {twice[1]} twice")
    return tuple(entries)
