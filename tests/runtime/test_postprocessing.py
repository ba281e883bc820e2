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
