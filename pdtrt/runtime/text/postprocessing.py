"""Postprocessing for Triton: token ids -> text (NVIDIA's ``TOKENS_BATCH`` /
``SEQUENCE_LENGTH`` -> ``OUTPUT``), and the ensemble's other outputs carried on, each on every
response (zeros, or an empty timing, where the middle step sent none:
:data:`~pdtrt.ensemble.PASSED_OUTPUTS`). Each streamed chunk is decoded on its own, as NVIDIA's
postprocessing does; special tokens are dropped. All of Triton goes through the injected seam
(:class:`~pdtrt.runtime.triton_io.Triton`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pdtrt.engine_io import Param, TensorSpec, TritonDType
from pdtrt.ensemble import PASSED_OUTPUTS, POSTPROCESSING_IO, passed_input, passed_output
from pdtrt.runtime.text.preprocessing import load_tokenizer
from pdtrt.runtime.triton_io import Triton, model_params

# (postprocessing's input, its output, the ensemble output's spec), named once, not per response
_PASSED = tuple((passed_input(t.name), passed_output(t.name), t) for t in PASSED_OUTPUTS)


class TritonPythonModel:
    def __init__(self, triton: Triton) -> None:
        self.triton = triton

    def initialize(self, args: dict[str, Any]) -> None:
        self.triton.watch_parent()  # gone with the server, as every pdtrt stub
        self.tokenizer = load_tokenizer(model_params(args)[Param.TOKENIZER_DIR])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in self.triton.receive(requests, POSTPROCESSING_IO.input_names,
                                           decoupled=False):
            tokens = request.tensor("TOKENS_BATCH")  # [B, beams, n]
            lengths = request.tensor("SEQUENCE_LENGTH")  # [B, beams]
            if tokens is None or lengths is None:
                responses.append(self.triton.error_response(
                    "postprocessing needs TOKENS_BATCH and SEQUENCE_LENGTH"))
                continue
            lengths = lengths.reshape(tokens.shape[0], -1)
            # the beams from the lengths: a response with no tokens ([B, beams, 0], the
            # router's last one when the timing comes after every token) has no -1 to infer
            tokens = tokens.reshape(*lengths.shape, tokens.shape[-1])
            texts = [[self.tokenizer.decode(tokens[b, k, :lengths[b, k]].tolist(),
                                            skip_special_tokens=True).encode("utf-8")
                      for k in range(tokens.shape[1])] for b in range(tokens.shape[0])]
            outputs = {"OUTPUT": np.array(texts, dtype=object)}
            for name, out, spec in _PASSED:
                value = request.tensor(name)
                outputs[out] = _placeholder(spec, tokens.shape[0]) if value is None else value
            responses.append(self.triton.response(outputs))
        return responses


def _placeholder(spec: TensorSpec, batch: int) -> np.ndarray:
    """What a response carries for ``spec`` when the middle step sent none: one zero (an
    empty string) per batch row, every other dimension 1 -- NVIDIA's placeholder shape."""
    shape = (batch, *(1 for _ in spec.dims))
    if spec.dtype is TritonDType.STRING:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=spec.dtype.numpy_name)
