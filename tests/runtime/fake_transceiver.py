"""An in-process stand-in for the reference LLM's UCX KV transceiver
(:class:`pdtrt.llmapi.reference.transceiver.KVCacheTransceiver`): one object shared by a
context LLM and a generation LLM in the same process. As the real one (and TensorRT-LLM 1.2),
offered KV is held until pulled or until ``hold_s`` has passed on ``clock`` -- nothing frees it
earlier. The real transfer is tested in tests/llmapi/test_reference_llm.py and
tests/llmapi/test_kv_transfer.py."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable

from pdtrt.errors import KVTransferError
from pdtrt.llmapi.reference.engine import pack_kv
from pdtrt.llmapi.reference.transceiver import HeldKV


class FakeTransceiver:
    def __init__(self, layout, *, hold_s: float = math.inf,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.layout = layout
        self.hold_s, self.clock = hold_s, clock
        self._held: dict[int, tuple[object, float]] = {}  # transfer id -> (kv, until)
        self._lens: dict[int, int] = {}  # transfer id -> prompt length
        self._ids = itertools.count(1)
        self.counts = {"offered": 0, "expired": 0, "pulled": 0, "pulled_bytes": 0}

    @property
    def held(self) -> dict[int, object]:
        now = self.clock()
        for tid in [t for t, (_, until) in self._held.items() if until <= now]:
            del self._held[tid]
            self.counts["expired"] += 1
        return {t: kv for t, (kv, _) in self._held.items()}

    def offer(self, kv, prompt_len: int, request_id: str = "") -> bytes:
        tid = next(self._ids)
        self._held[tid] = (kv, self.clock() + self.hold_s)
        self._lens[tid] = prompt_len
        self.counts["offered"] += 1
        return HeldKV(address=b"fake", transfer_id=tid, kv_nbytes=int(pack_kv(kv).nbytes),
                      prompt_len=prompt_len, layout=self.layout).encode()

    def pull(self, state: bytes, prompt_len: int):
        held = HeldKV.decode(state)
        kv = self.held.get(held.transfer_id)
        if kv is None:
            raise KVTransferError(f"the prefill instance no longer holds KV transfer "
                                  f"{held.transfer_id:x}")
        del self._held[held.transfer_id]
        self.counts["pulled"] += 1
        self.counts["pulled_bytes"] += held.kv_nbytes
        return kv

    def held_prompt_lens(self) -> list[int]:
        return [self._lens[t] for t in self.held]

    def stats(self) -> dict[str, float]:
        return {"held": len(self.held), "pull_s": 0.0, **self.counts}

    def stop(self) -> None:
        pass
