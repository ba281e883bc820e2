"""Postprocessing for Triton: token ids -> text (NVIDIA's ``TOKENS_BATCH`` /
``SEQUENCE_LENGTH`` -> ``OUTPUT``). Each streamed chunk is decoded on its own, as NVIDIA's
postprocessing does; special tokens are dropped."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from pdtrt.engine_io import Param
from pdtrt.runtime.preprocessing_model import load_tokenizer
from pdtrt.runtime.triton_io import model_params, tensor


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        self.tokenizer = load_tokenizer(model_params(args)[Param.TOKENIZER_DIR])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            tokens = tensor(request, "TOKENS_BATCH")  # [B, beams, n]
            lengths = tensor(request, "SEQUENCE_LENGTH")  # [B, beams]
            if tokens is None or lengths is None:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    "postprocessing needs TOKENS_BATCH and SEQUENCE_LENGTH")))
                continue
            tokens = tokens.reshape(tokens.shape[0], -1, tokens.shape[-1])
            lengths = lengths.reshape(tokens.shape[0], -1)
            texts = [[self.tokenizer.decode(tokens[b, k, :lengths[b, k]].tolist(),
                                            skip_special_tokens=True).encode("utf-8")
                      for k in range(tokens.shape[1])] for b in range(tokens.shape[0])]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", np.array(texts, dtype=object))]))
        return responses
