"""``context_phase_params``: what a prefill (context-only) request hands to its decode request.

It mirrors TensorRT-LLM's cache-transceiver state (comm state + cache state): the request id,
the first generated token(s), the prefill worker's UCX address and the id under which it holds
the KV, and the KV layout (layers, KV heads, head dim, dtype, tokens per block) with the size of
the buffer, so the decode side can allocate, pull and check it. On the wire it is a UINT8
tensor holding UTF-8 JSON (opaque to the router and the client).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import numpy as np

from pdtrt.build.manifest import KVLayout
from pdtrt.errors import KVTransferError

__all__ = ["ContextPhaseParams"]

_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class ContextPhaseParams:
    request_id: str
    first_tokens: tuple[int, ...]
    prompt_len: int  # tokens whose KV is held (the whole prompt)
    ucx_address: bytes  # the prefill instance's UCX worker address
    transfer_id: int  # key of the held KV on the prefill instance
    kv_nbytes: int
    layout: KVLayout

    def to_array(self) -> np.ndarray:
        doc = {
            "v": _VERSION,
            "request_id": self.request_id,
            "first_tokens": list(self.first_tokens),
            "prompt_len": self.prompt_len,
            "ucx_address": base64.b64encode(self.ucx_address).decode(),
            "transfer_id": self.transfer_id,
            "kv_nbytes": self.kv_nbytes,
            "layout": self.layout.model_dump(mode="json"),
        }
        return np.frombuffer(json.dumps(doc, sort_keys=True).encode(), dtype=np.uint8).copy()

    @classmethod
    def from_array(cls, array: np.ndarray) -> ContextPhaseParams:
        try:
            doc = json.loads(np.asarray(array, dtype=np.uint8).tobytes().decode())
            if doc.get("v") != _VERSION:
                raise ValueError(f"version {doc.get('v')!r}, expected {_VERSION}")
            return cls(
                request_id=str(doc["request_id"]),
                first_tokens=tuple(int(t) for t in doc["first_tokens"]),
                prompt_len=int(doc["prompt_len"]),
                ucx_address=base64.b64decode(doc["ucx_address"]),
                transfer_id=int(doc["transfer_id"]),
                kv_nbytes=int(doc["kv_nbytes"]),
                layout=KVLayout.model_validate(doc["layout"]),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise KVTransferError(f"malformed context_phase_params: {exc}",
                                  hint="pass the context_phase_params output of the prefill "
                                  "(context_only) request unchanged") from None
