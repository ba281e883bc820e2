"""``context_phase_params``: what a prefill (context-only) request hands to its decode request.

It carries the context phase's LLM-API ``DisaggregatedParams`` (``tensorrt_llm/
disaggregated_params.py`` at 01009a33a704c61e2c183c40514d7fb59159ab09: ``ctx_request_id``,
``first_gen_tokens``, ``opaque_state`` -- the engine's serialized transfer state, bytes --
and ``draft_tokens``) plus the prompt length the held KV covers, so the decode side can check it
before it asks the engine to pull, and -- when the request asked -- the first token(s)'
log-probabilities and their alternatives (``num_top_log_probs``), which the decode side reports
for those tokens. The router and the client never look inside.

On the wire it is a UINT8 tensor, versioned and length-checked::

    b"PDCP" | version u16 | meta_len u32 | opaque_len u32 | meta (UTF-8 JSON) | opaque_state

A buffer whose lengths do not add up, or without the header, is "malformed"; a different version
is refused by name (a prefill and a decode pool running different pdtrt releases).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdtrt.engine_io import RequestType, TopLogProbs
from pdtrt.errors import KVTransferError

__all__ = ["ENCODING_VERSION", "ContextPhaseParams"]

ENCODING_VERSION = 1
_MAGIC = b"PDCP"
_HEADER = struct.Struct("<4sHII")
_HINT = "pass the context_phase_params output of the prefill (context_only) request unchanged"


def _malformed(why: str) -> KVTransferError:
    return KVTransferError(f"malformed context_phase_params: {why}", hint=_HINT)


@dataclass(frozen=True, kw_only=True)
class ContextPhaseParams:
    ctx_request_id: int | None
    first_gen_tokens: tuple[int, ...]
    opaque_state: bytes
    draft_tokens: tuple[int, ...] | None
    prompt_len: int  # tokens whose KV is held (the whole prompt)
    # the first token(s)' log-probabilities, when the request asked for them: the decode
    # side reports them for those tokens (TensorRT-LLM's context result does not carry them)
    first_gen_log_probs: tuple[float, ...] | None = None
    # and their alternatives (num_top_log_probs), when asked: the decode side reports them too
    first_gen_top_log_probs: tuple[TopLogProbs, ...] | None = None

    @classmethod
    def from_disaggregated(cls, params: Any, prompt_len: int,
                           first_gen_log_probs: tuple[float, ...] | None = None,
                           first_gen_top_log_probs: tuple[TopLogProbs, ...] | None = None
                           ) -> ContextPhaseParams:
        """From a context-only result's ``outputs[0].disaggregated_params`` (and the
        log-probabilities of its tokens and their alternatives, when asked)."""
        return cls(ctx_request_id=params.ctx_request_id,
                   first_gen_tokens=tuple(int(t) for t in params.first_gen_tokens or ()),
                   opaque_state=bytes(params.opaque_state or b""),
                   draft_tokens=None if params.draft_tokens is None
                   else tuple(int(t) for t in params.draft_tokens),
                   prompt_len=prompt_len, first_gen_log_probs=first_gen_log_probs,
                   first_gen_top_log_probs=first_gen_top_log_probs)

    def to_disaggregated(self, disaggregated_params_cls: Any,
                         has: Callable[[str], bool] = lambda name: True) -> Any:
        """The generation-only ``DisaggregatedParams`` (of the LLM API in use), with only the
        fields that are set and that the class has (``has``): ``first_gen_log_probs`` -- one
        ``{token: log-probability}`` per first token -- exists from TensorRT-LLM's 1.3 line on
        (PR #11727), and an unknown keyword is a ``TypeError`` in its keyword-only dataclass.
        Without it the engine model reports the first tokens' log-probabilities itself."""
        fields: dict[str, Any] = {
            "request_type": str(RequestType.GENERATION_ONLY),
            "ctx_request_id": self.ctx_request_id, "first_gen_tokens": list(self.first_gen_tokens),
            "opaque_state": self.opaque_state,
            "draft_tokens": None if self.draft_tokens is None else list(self.draft_tokens),
            "first_gen_log_probs": None if self.first_gen_log_probs is None else
            [{t: lp} for t, lp in zip(self.first_gen_tokens, self.first_gen_log_probs,
                                      strict=True)]}
        return disaggregated_params_cls(**{k: v for k, v in fields.items()
                                           if v is not None and has(k)})

    def to_array(self) -> np.ndarray:
        meta = json.dumps({"ctx_request_id": self.ctx_request_id,
                           "first_gen_tokens": list(self.first_gen_tokens),
                           "draft_tokens": None if self.draft_tokens is None
                           else list(self.draft_tokens),
                           "prompt_len": self.prompt_len,
                           "first_gen_log_probs": None if self.first_gen_log_probs is None
                           else list(self.first_gen_log_probs),
                           "first_gen_top_log_probs": None
                           if self.first_gen_top_log_probs is None
                           else [[list(pair) for pair in row]
                                 for row in self.first_gen_top_log_probs]},
                          sort_keys=True).encode()
        raw = _HEADER.pack(_MAGIC, ENCODING_VERSION, len(meta), len(self.opaque_state)) + \
            meta + self.opaque_state
        return np.frombuffer(raw, dtype=np.uint8).copy()

    @classmethod
    def from_array(cls, array: np.ndarray) -> ContextPhaseParams:
        """Raises :class:`KVTransferError`: malformed (header, lengths, fields) or another
        encoding version."""
        raw = np.asarray(array, dtype=np.uint8).tobytes()
        if len(raw) < _HEADER.size or raw[:4] != _MAGIC:
            raise _malformed(f"{len(raw)} bytes without pdtrt's {_MAGIC.decode()} header")
        _, version, meta_len, opaque_len = _HEADER.unpack_from(raw)
        if version != ENCODING_VERSION:
            raise KVTransferError(
                f"context_phase_params encoding version {version}; this engine model reads "
                f"version {ENCODING_VERSION}",
                hint="the prefill and decode pools run different pdtrt releases: deploy one")
        if len(raw) != _HEADER.size + meta_len + opaque_len:
            raise _malformed(f"{len(raw)} bytes, the header says "
                             f"{_HEADER.size} + {meta_len} + {opaque_len}")
        try:
            meta = json.loads(raw[_HEADER.size:_HEADER.size + meta_len].decode())
            draft = meta["draft_tokens"]
            rid = meta["ctx_request_id"]
            logprobs = meta.get("first_gen_log_probs")  # absent: written by pdtrt before it
            top = meta.get("first_gen_top_log_probs")  # likewise
            params = cls(ctx_request_id=None if rid is None else int(rid),
                         first_gen_tokens=tuple(int(t) for t in meta["first_gen_tokens"]),
                         opaque_state=raw[_HEADER.size + meta_len:],
                         draft_tokens=None if draft is None else tuple(int(t) for t in draft),
                         prompt_len=int(meta["prompt_len"]),
                         first_gen_log_probs=None if logprobs is None
                         else tuple(float(v) for v in logprobs),
                         first_gen_top_log_probs=None if top is None
                         else tuple(tuple((int(t), float(v)) for t, v in row) for row in top))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise _malformed(str(exc)) from None
        if params.first_gen_log_probs is not None and \
                len(params.first_gen_log_probs) != len(params.first_gen_tokens):
            raise _malformed(f"{len(params.first_gen_log_probs)} first-token log-probabilities "
                             f"for {len(params.first_gen_tokens)} first tokens")
        if params.first_gen_top_log_probs is not None and \
                len(params.first_gen_top_log_probs) != len(params.first_gen_tokens):
            raise _malformed(f"{len(params.first_gen_top_log_probs)} first-token alternatives "
                             f"for {len(params.first_gen_tokens)} first tokens")
        return params
