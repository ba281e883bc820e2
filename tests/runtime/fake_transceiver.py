"""An in-process stand-in for the reference LLM's UCX KV transceiver
(:class:`pdtrt.llmapi.reference.transceiver.KVCacheTransceiver`): one object shared by a
context LLM and a generation LLM in the same process; offered KV is held until pulled or
released. The real transfer is tested in tests/llmapi/test_reference_llm.py and
tests/llmapi/test_kv_transfer.py."""

from __future__ import annotations

import itertools

from pdtrt.errors import KVTransferError
from pdtrt.llmapi.reference.engine import pack_kv
from pdtrt.llmapi.reference.transceiver import HeldKV


class FakeTransceiver:
    def __init__(self, layout) -> None:
        self.layout = layout
        self.held: dict[int, object] = {}
        self._ids = itertools.count(1)
        self.released: list[int] = []
        self.counts = {"offered": 0, "expired": 0, "pulled": 0, "pulled_bytes": 0}

    def offer(self, kv, prompt_len: int) -> bytes:
        tid = next(self._ids)
        self.held[tid] = kv
        self.counts["offered"] += 1
        return HeldKV(address=b"fake", transfer_id=tid, kv_nbytes=int(pack_kv(kv).nbytes),
                      prompt_len=prompt_len, layout=self.layout).encode()

    def release(self, state: bytes) -> bool:
        tid = HeldKV.decode(state).transfer_id
        self.released.append(tid)
        return self.held.pop(tid, None) is not None

    def pull(self, state: bytes, prompt_len: int):
        held = HeldKV.decode(state)
        kv = self.held.pop(held.transfer_id, None)
        if kv is None:
            raise KVTransferError(f"the prefill instance no longer holds KV transfer "
                                  f"{held.transfer_id:x}")
        self.counts["pulled"] += 1
        self.counts["pulled_bytes"] += held.kv_nbytes
        return kv

    def stats(self) -> dict[str, float]:
        return {"held": len(self.held), "released": len([t for t in self.released]),
                "pull_s": 0.0, **self.counts}

    def stop(self) -> None:
        pass
