"""Multi-turn chats in a benchmark: a trace whose entries carry a ``conversation_id``
(:mod:`pdtrt.workload.trace`) is a set of conversations, each a sequence of turns.

Each turn is sent with the conversation so far: the earlier turns' prompts and the answers the
server gave them, then the turn's own prompt, one per line -- what a chat client resends, and
what makes a KV-aware router or an engine's prefix cache pay off. A turn is sent when the
previous turn's answer has ended and its ``think_s`` has passed (none before the first turn).
A user (closed loop) plays one conversation after another; in an open loop, conversations
start at the run's arrival times and play out on their own. A turn whose answer failed ends
its conversation (the history would be wrong).

Turns are ordered by ``turn`` where the trace gives it, else by file order; turn ``k``'s own
prompt and ``max_tokens`` are the trace entry's (or, with ``isl`` only, synthetic words drawn
for that entry as for any trace request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdtrt.workload.trace import TraceEntry

__all__ = ["Conversation", "Turn", "conversations", "with_history"]


@dataclass(frozen=True, kw_only=True)
class Turn:
    number: int  # 0 for the first turn of its conversation
    position: int  # the entry's position in the trace (its request draw)
    think_s: float


@dataclass(frozen=True, kw_only=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]


def conversations(entries: Sequence[TraceEntry]) -> tuple[Conversation, ...]:
    """The trace's conversations, in order of their first entry; () for a trace without
    conversation ids."""
    grouped: dict[str, list[tuple[int, int]]] = {}
    for position, entry in enumerate(entries):
        if entry.conversation_id is None:
            continue
        order = entry.turn if entry.turn is not None else position
        grouped.setdefault(entry.conversation_id, []).append((order, position))
    out = []
    for cid, items in grouped.items():
        ordered = [p for _, p in sorted(items)]
        out.append(Conversation(id=cid, turns=tuple(
            Turn(number=k, position=p, think_s=(entries[p].think_s or 0.0) if k else 0.0)
            for k, p in enumerate(ordered))))
    return tuple(out)


def with_history(history: Sequence[str], prompt: str) -> str:
    """The text a turn sends: the conversation so far, then its own prompt, one per line."""
    return "\n".join([*history, prompt])
