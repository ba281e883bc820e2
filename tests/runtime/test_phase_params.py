"""``context_phase_params``: pdtrt's versioned, length-checked encoding of the context phase's
disaggregated params (pdtrt/runtime/phase_params.py)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pdtrt.errors import KVTransferError
from pdtrt.llmapi.reference import DisaggregatedParams
from pdtrt.runtime.phase_params import ENCODING_VERSION, ContextPhaseParams

PARAMS = ContextPhaseParams(ctx_request_id=7, first_gen_tokens=(42,), opaque_state=b"\x00state\xff",
                            draft_tokens=None, prompt_len=5)


def test_it_round_trips_into_generation_only_disaggregated_params():
    back = ContextPhaseParams.from_array(PARAMS.to_array().reshape(1, -1))
    assert back == PARAMS
    gen = back.to_disaggregated(DisaggregatedParams)
    assert gen == DisaggregatedParams(request_type="generation_only", ctx_request_id=7,
                                      first_gen_tokens=[42], opaque_state=b"\x00state\xff")


def _patched(offset: int, fmt: str, value: int) -> np.ndarray:
    raw = bytearray(PARAMS.to_array().tobytes())
    struct.pack_into(fmt, raw, offset, value)
    return np.frombuffer(bytes(raw), dtype=np.uint8)


def test_another_encoding_version_is_refused_by_name():
    with pytest.raises(KVTransferError) as err:
        ContextPhaseParams.from_array(_patched(4, "<H", ENCODING_VERSION + 1))
    assert err.value.message == (f"context_phase_params encoding version {ENCODING_VERSION + 1}; "
                                 f"this engine model reads version {ENCODING_VERSION}")
    assert "different pdtrt releases" in err.value.hint


@pytest.mark.parametrize(("raw", "why"), [
    (np.array([1, 2, 3], dtype=np.uint8), "3 bytes without pdtrt's PDCP header"),
    (PARAMS.to_array()[:-1], "bytes, the header says"),
    (np.concatenate([PARAMS.to_array(), np.zeros(2, dtype=np.uint8)]), "bytes, the header says"),
    (_patched(6, "<I", 3), "the header says 14 + 3 + 7"),
], ids=["no-header", "truncated", "trailing-bytes", "wrong-meta-length"])
def test_a_malformed_buffer_is_refused(raw, why):
    with pytest.raises(KVTransferError, match="malformed context_phase_params") as err:
        ContextPhaseParams.from_array(raw)
    assert why in err.value.message
