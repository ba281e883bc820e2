"""Preprocessing for Triton: text -> token ids with the deployment's local HF tokenizer.

NVIDIA's preprocessing I/O (:data:`pdtrt.ensemble.PREPROCESSING_IO`): ``QUERY`` and
``REQUEST_OUTPUT_LEN`` in; ``INPUT_ID``, ``REQUEST_INPUT_LEN``, the bad/stop word lists,
``REQUEST_OUTPUT_LEN``, ``OUT_END_ID`` / ``OUT_PAD_ID`` (the tokenizer's, unless the request
gives them) out. One prompt per request, like every pdtrt model
(:func:`~pdtrt.runtime.request_parsing.one_prompt`). Each string of ``stop_words`` /
``bad_words`` is one word, encoded without special tokens into TensorRT-LLM's ``[1, 2, n]``
word list (:func:`word_list_array`; an empty string is no word), as NVIDIA's preprocessing
does. The tokenizer loads from a local directory with remote code disabled. All of Triton goes
through the injected seam (:class:`~pdtrt.runtime.triton_io.Triton`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pdtrt.engine_io import Param
from pdtrt.ensemble import PREPROCESSING_IO, PREPROCESSING_STEP_MAP
from pdtrt.errors import InvalidRequestError
from pdtrt.runtime.request_parsing import one_prompt
from pdtrt.runtime.triton_io import Incoming, Triton, model_params

# The ensemble's names of the preprocessing inputs (``text_input`` for ``QUERY``), for messages.
_ENSEMBLE_NAME = dict(PREPROCESSING_STEP_MAP.inputs)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)


class TritonPythonModel:
    def __init__(self, triton: Triton) -> None:
        self.triton = triton

    def initialize(self, args: dict[str, Any]) -> None:
        self.triton.watch_parent()  # gone with the server, as every pdtrt stub
        self.tokenizer = load_tokenizer(model_params(args)[Param.TOKENIZER_DIR])
        self.end_id = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else -1
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.end_id

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._one(r) for r in self.triton.receive(requests, PREPROCESSING_IO.input_names,
                                                          decoupled=False)]

    def _one(self, request: Incoming) -> Any:
        query = request.tensor("QUERY")
        if query is None or query.size == 0:
            return self.triton.error_response("text_input is missing")
        texts = [q.decode("utf-8", "replace") if isinstance(q, bytes) else str(q)
                 for q in query.reshape(-1)]
        try:
            one_prompt(_ENSEMBLE_NAME["QUERY"], len(texts))
        except InvalidRequestError as exc:
            return self.triton.error_response(exc.message)
        if any(not t for t in texts):
            return self.triton.error_response(
                "text_input is empty; give a prompt of at least one token")
        batch = len(texts)
        ids = [self.tokenizer.encode(t) for t in texts]
        longest = max(len(i) for i in ids)
        input_id = np.full((batch, longest), self.pad_id, dtype=np.int32)
        for row, seq in enumerate(ids):
            input_id[row, :len(seq)] = seq
        out_len = request.tensor("REQUEST_OUTPUT_LEN")
        if out_len is None:
            return self.triton.error_response("max_tokens is missing")
        end = request.tensor("END_ID")
        pad = request.tensor("PAD_ID")
        column = lambda v: np.array(v, dtype=np.int32).reshape(batch, 1)  # noqa: E731
        return self.triton.response({
            "INPUT_ID": input_id,
            "REQUEST_INPUT_LEN": column([len(i) for i in ids]),
            "BAD_WORDS_IDS": word_list_array(self.tokenizer, _words(request, "BAD_WORDS_DICT")),
            "STOP_WORDS_IDS": word_list_array(self.tokenizer,
                                              _words(request, "STOP_WORDS_DICT")),
            "REQUEST_OUTPUT_LEN": column(out_len.reshape(-1)[:batch]),
            "OUT_END_ID": column(end.reshape(-1)[:batch] if end is not None
                                 else [self.end_id] * batch),
            "OUT_PAD_ID": column(pad.reshape(-1)[:batch] if pad is not None
                                 else [self.pad_id] * batch),
        })


def _words(request: Incoming, name: str) -> list[str]:
    words = request.tensor(name)
    if words is None:
        return []
    return [w.decode("utf-8", "replace") if isinstance(w, bytes) else str(w)
            for w in words.reshape(-1)]


def word_list_array(tokenizer: Any, words: list[str]) -> np.ndarray:
    """TensorRT-LLM's word list of one request, ``[1, 2, n]``: the words' token ids one after
    another (padded with 0), then the end offset of each word (padded with -1); ``[[[0], [-1]]]``
    for no words. Each word is encoded on its own, without special tokens."""
    encoded = [ids for w in words if w and (ids := tokenizer.encode(w, add_special_tokens=False))]
    flat = [t for ids in encoded for t in ids]
    ends = np.cumsum([len(ids) for ids in encoded]).tolist()
    width = max(len(flat), 1)
    return np.array([[flat + [0] * (width - len(flat)), ends + [-1] * (width - len(ends))]],
                    dtype=np.int32)
