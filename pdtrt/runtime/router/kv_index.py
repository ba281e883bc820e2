"""What each endpoint's KV cache holds, as the router knows it: the KV index (issue 27, item 2).

An engine with block reuse keeps the full blocks of the prompts (and answers) it served and
reuses a new prompt's longest cached chain of leading blocks. Each engine model instance keeps
the hashes of the blocks it holds in a log fed by TensorRT-LLM's KV cache events and answers a
router's cursor with the changes since, or a snapshot (:mod:`pdtrt.runtime.engine.kv_events`,
which also shows the answer's shape). :class:`KvIndex` is one endpoint's side of that: per
engine instance (an *epoch*: a reloaded or restarted instance is a new one) the set of hashes.
:func:`poll` asks one endpoint and applies the answer; the router polls every endpoint of the
pools it routes by KV every ``kv_events_interval_s`` (Dynamo's and trtllm-serve's KV-aware
routers are fed the same way: events from each worker, by subscription or by polling).

A prompt's overlap with an endpoint is the number of its leading full blocks whose chained
hashes (:func:`pdtrt.kv_blocks.block_hashes`: a hash names the whole prefix up to its block)
the endpoint holds -- for an endpoint of several instances, the best instance's, since the
router cannot choose the instance (Triton does). It is what the engine would reuse, within
``len - 1`` tokens (:func:`pdtrt.kv_blocks.reusable_blocks`).

The index is never trusted past what it knows: an ejected endpoint's index is cleared (its
engine may come back empty); an endpoint whose instance restarted answers from a new epoch,
which replaces its old one (at most ``instances`` epochs are kept, the one heard from least
recently going first); and an answer that cannot be read leaves the index as it was, to be
resynchronised by the next one.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field

import numpy as np

from pdtrt.client.streams import StreamClient, probe_inputs
from pdtrt.engine_io import KV_EVENTS_OUTPUT
from pdtrt.runtime.request_parsing import KV_EVENTS_CURSOR

__all__ = ["NO_EVENTS", "KvIndex", "ask", "kv_events_inputs", "poll"]

log = logging.getLogger(__name__)

KV_EVENTS_ID_PREFIX = "pdtrt-kv-events-"
# the engine model's answer when its engine records no KV events (block reuse off)
NO_EVENTS = "records no KV cache events"


@dataclass
class _Instance:
    seq: int = 0
    blocks: set[int] = field(default_factory=set)
    heard: int = 0  # the index's answer counter when this instance last answered


@dataclass
class KvIndex:
    """One endpoint's blocks per engine instance (epoch); see the module docstring."""

    instances: int = 1  # the endpoint's model instances: epochs kept at most
    _epochs: dict[str, _Instance] = field(default_factory=dict)
    _answers: int = 0
    snapshots: int = 0  # answers that were snapshots (the first, and each resynchronisation)
    publishes: bool = True  # False once the engine said it records no KV events

    @property
    def num_blocks(self) -> int:
        return sum(len(i.blocks) for i in self._epochs.values())

    def cursor(self) -> str:
        """What the router sends: ``EPOCH:SEQ`` of every instance it knows, comma-separated
        ("" at first: the engine answers with a snapshot)."""
        return ",".join(f"{epoch}:{i.seq}" for epoch, i in self._epochs.items())

    def clear(self) -> None:
        """Forget everything (the endpoint was ejected): the next answer is a snapshot, from
        an engine that may have come back with block reuse on."""
        self._epochs.clear()
        self.publishes = True

    def apply(self, answer: str) -> None:
        """Apply one engine answer (JSON); raises :class:`ValueError` for one that does not
        read, leaving the index as it was."""
        try:
            doc = json.loads(answer)
            epoch, seq = str(doc["epoch"]), int(doc["seq"])
            snapshot = doc.get("snapshot")
            changes = [(op, [int(h) for h in hashes]) for op, hashes in doc.get("changes", ())]
            blocks = None if snapshot is None else {int(h) for h in snapshot}
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"a KV-events answer that does not read: {exc}") from None
        self._answers += 1
        instance = self._epochs.get(epoch)
        if blocks is not None:
            self.snapshots += 1
            instance = self._epochs[epoch] = _Instance(seq=seq, blocks=blocks)
        elif instance is None:  # changes for an epoch we never had: wait for a snapshot
            raise ValueError(f"KV-events changes for unknown epoch {epoch!r}")
        else:
            for op, hashes in changes:
                if op == "+":
                    instance.blocks.update(hashes)
                else:
                    instance.blocks.difference_update(hashes)
            instance.seq = seq
        instance.heard = self._answers
        while len(self._epochs) > max(self.instances, 1):  # a restarted instance's old epoch
            del self._epochs[min(self._epochs, key=lambda e: self._epochs[e].heard)]

    def overlap(self, hashes: Sequence[int]) -> int:
        """How many of ``hashes`` (a prompt's chained block hashes, in order) lead a chain
        that one instance holds whole."""
        best = 0
        for instance in self._epochs.values():
            n = 0
            for h in hashes:
                if h not in instance.blocks:
                    break
                n += 1
            best = max(best, n)
        return best


def kv_events_inputs(cursor: str) -> dict[str, np.ndarray]:
    """A KV-events request: a health probe's inputs (Triton requires them) less its ``stop``,
    plus the cursor."""
    inputs = probe_inputs()
    del inputs["stop"]
    inputs[KV_EVENTS_CURSOR] = np.array([[cursor.encode()]], dtype=np.object_)
    return inputs


async def ask(client: StreamClient, model: str, cursor: str, *,
              error_output: str = "") -> tuple[str | None, str | None]:
    """One KV-events request to ``model`` with ``cursor``: (its answer, None), or (None, what
    went wrong)."""
    stream = client.stream(model, kv_events_inputs(cursor),
                           request_id=KV_EVENTS_ID_PREFIX + secrets.token_hex(6),
                           parameters={}, outputs=[KV_EVENTS_OUTPUT], error_output=error_output,
                           fail_fast=True)
    answer = None
    async with aclosing(stream) as responses:
        async for r in responses:
            if r.error is not None:
                return None, r.error
            if KV_EVENTS_OUTPUT in r.outputs:
                raw = r.outputs[KV_EVENTS_OUTPUT].reshape(-1)[0]
                answer = raw.decode() if isinstance(raw, bytes) else str(raw)
    return (answer, None) if answer is not None else (None, "no KV-events answer")


async def poll(client: StreamClient, model: str, index: KvIndex, *,
               error_output: str = "") -> str | None:
    """Ask ``model`` for its blocks since ``index``'s cursor and apply the answer: None when
    it did, else what went wrong (the index is left as it was)."""
    answer, problem = await ask(client, model, index.cursor(), error_output=error_output)
    if answer is None:
        if problem is not None and NO_EVENTS in problem:  # block reuse is off: not asked again
            index.publishes = False
        return problem
    try:
        index.apply(answer)
    except ValueError as exc:
        return str(exc)
    return None
