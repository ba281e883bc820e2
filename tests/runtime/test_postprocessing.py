"""Postprocessing decodes each response of the ensemble's middle step, an empty one too."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.runtime.text.postprocessing import TritonPythonModel
from tests.runtime.fake_triton import FakeRequest, FakeTriton


class _Tokenizer:
    def decode(self, ids, *, skip_special_tokens):
        return "".join(f"<{i}>" for i in ids)


@pytest.mark.parametrize(("tokens", "lengths", "text"), [
    (np.array([[[5, 6, 7]]], dtype=np.int32), [[2]], b"<5><6>"),
    # the router's last response when every token went out before its timing: no tokens
    (np.zeros((1, 1, 0), dtype=np.int32), [[0]], b""),
], ids=["tokens", "empty"])
def test_a_response_decodes_to_its_text(tokens, lengths, text):
    model = TritonPythonModel(FakeTriton())
    model.tokenizer = _Tokenizer()
    request = FakeRequest(inputs={"TOKENS_BATCH": tokens,
                                  "SEQUENCE_LENGTH": np.array(lengths, dtype=np.int32)})
    (response,) = model.execute([request])
    assert response.error is None
    assert response.outputs["OUTPUT"].tolist() == [[text]]


def test_every_other_output_is_carried_on_and_a_missing_one_is_a_placeholder():
    """perf_analyzer (genai-perf) reads every declared output of every response: each of the
    ensemble's outputs is on every response, the middle step's value where it sent one."""
    model = TritonPythonModel(FakeTriton())
    model.tokenizer = _Tokenizer()
    tokens = {"TOKENS_BATCH": np.array([[[5, 6]]], dtype=np.int32),
              "SEQUENCE_LENGTH": np.array([[2]], dtype=np.int32)}
    asked = FakeRequest(inputs={**tokens,
                                "CUM_LOG_PROBS": np.array([[-1.5]], dtype=np.float32),
                                "OUTPUT_LOG_PROBS": np.array([[[-1.0, -0.5]]], dtype=np.float32),
                                "NUM_OUTPUT_TOKENS": np.array([[2]], dtype=np.int32),
                                "PDTRT_TIMING": np.array([[b'{"ttft_ms": 3}']], dtype=object)})
    not_asked = FakeRequest(inputs=tokens)
    carried, placeholders = model.execute([asked, not_asked])
    assert carried.outputs["OUT_CUM_LOG_PROBS"].tolist() == [[-1.5]]
    assert carried.outputs["OUT_OUTPUT_LOG_PROBS"].tolist() == [[[-1.0, -0.5]]]
    assert carried.outputs["OUT_NUM_OUTPUT_TOKENS"].tolist() == [[2]]
    assert carried.outputs["OUT_NUM_INPUT_TOKENS"].tolist() == [[0]]  # not sent: a zero
    assert carried.outputs["OUT_PDTRT_TIMING"].tolist() == [[b'{"ttft_ms": 3}']]
    out = placeholders.outputs
    assert set(out) == {"OUTPUT", "OUT_CUM_LOG_PROBS", "OUT_OUTPUT_LOG_PROBS",
                        "OUT_NUM_INPUT_TOKENS", "OUT_NUM_OUTPUT_TOKENS", "OUT_PDTRT_TIMING"}
    assert out["OUT_CUM_LOG_PROBS"].dtype == np.float32 and out["OUT_CUM_LOG_PROBS"].shape == (1, 1)
    assert out["OUT_OUTPUT_LOG_PROBS"].shape == (1, 1, 1)
    assert out["OUT_NUM_OUTPUT_TOKENS"].dtype == np.int32
    assert out["OUT_PDTRT_TIMING"].tolist() == [[b""]]
