"""Map a :class:`GenerateRequest` onto the NVIDIA TensorRT-LLM ensemble's input tensors.

The ensemble I/O (``shared/reference/triton-trtllm.md``): ``text_input`` BYTES and
``max_tokens`` INT32 are required; ``stream``, ``exclude_input_in_output``, ``temperature``,
``top_k``, ``top_p`` and the seed (``random_seed`` before TRT-LLM 1.2, ``seed`` after) are
optional; ``end_id`` -1 (:attr:`GenerateRequest.ignore_eos`) turns the end token off, as
NVIDIA's ensemble and pdtrt's take it (the preprocessing model passes it on as ``OUT_END_ID``);
pdtrt's disaggregated ensemble also takes ``return_timing`` (:mod:`pdtrt.client.timing`). Where
the model declares ``return_num_output_tokens`` (and its output ``num_output_tokens``) it is
asked, so each response says how many tokens it holds (TensorRT-LLM's ``stream_interval`` puts
several in one). Only the inputs a model declares are sent, with the dtypes it declares, so the
same client talks to pdtrt's generated ensembles and NVIDIA's. Asking for a sampling setting (or
``ignore_eos``) the model does not declare is a :class:`~pdtrt.errors.RequestError`, not a
silent drop.
"""

from __future__ import annotations

from pdtrt.client.types import GenerateRequest, InputTensor, ModelSignature
from pdtrt.engine_io import TIMING_INPUT
from pdtrt.errors import RequestError

__all__ = ["COUNT_INPUT", "COUNT_OUTPUT", "OUTPUT_NAME", "REQUIRED_INPUTS", "build_inputs"]

REQUIRED_INPUTS = ("text_input", "max_tokens")
OUTPUT_NAME = "text_output"
# NVIDIA's token count of each response (the ensemble's optional input and its output)
COUNT_INPUT, COUNT_OUTPUT = "return_num_output_tokens", "num_output_tokens"
_SEED_NAMES = ("random_seed", "seed")
_DEFAULT_DTYPES = {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL",
                   "exclude_input_in_output": "BOOL", "temperature": "FP32", "top_k": "INT32",
                   "top_p": "FP32", "random_seed": "UINT64", "seed": "UINT64",
                   "end_id": "INT32", TIMING_INPUT: "BOOL", COUNT_INPUT: "BOOL"}
NO_END_ID = -1  # the end_id that no token matches: generation runs to max_tokens


def _missing_io(signature: ModelSignature) -> list[str]:
    missing = [n for n in REQUIRED_INPUTS if n not in signature.inputs]
    if signature.outputs and OUTPUT_NAME not in signature.outputs:
        missing.append(f"output {OUTPUT_NAME}")
    return missing


def build_inputs(request: GenerateRequest, signature: ModelSignature) -> list[InputTensor]:
    """The tensors to send for ``request`` to the model described by ``signature``.

    Raises :class:`RequestError` when the model lacks the ensemble I/O or an input the
    request sets.
    """
    missing = _missing_io(signature)
    if missing:
        raise RequestError(
            f"model '{signature.name}' does not speak the TensorRT-LLM ensemble I/O: it lacks "
            + ", ".join(missing),
            hint="point --model at the ensemble (text_input, max_tokens -> text_output)")
    seed_name = next((n for n in _SEED_NAMES if n in signature.inputs), "random_seed")
    wanted: dict[str, object] = {"text_input": request.prompt.encode(),
                                 "max_tokens": request.max_tokens}
    optional: dict[str, object | None] = {
        "stream": request.stream, "exclude_input_in_output": request.exclude_input_in_output,
    }
    sampling: dict[str, object | None] = {
        "temperature": request.temperature, "top_k": request.top_k, "top_p": request.top_p,
        seed_name: request.seed, "end_id": NO_END_ID if request.ignore_eos else None,
    }
    for name, value in optional.items():
        if name in signature.inputs:
            wanted[name] = value
    if request.return_timing and TIMING_INPUT in signature.inputs:
        wanted[TIMING_INPUT] = True
    if COUNT_INPUT in signature.inputs and (not signature.outputs
                                            or COUNT_OUTPUT in signature.outputs):
        wanted[COUNT_INPUT] = True  # a response may hold several tokens (stream_interval)
    for name, value in sampling.items():
        if value is None:
            continue
        if name not in signature.inputs:
            raise RequestError(f"model '{signature.name}' has no input '{name}'",
                               hint="drop that option; the model declares: "
                               + ", ".join(sorted(signature.inputs)))
        wanted[name] = value
    if request.stream is False and "stream" not in signature.inputs:
        raise RequestError(f"model '{signature.name}' has no 'stream' input: cannot turn "
                           "streaming off", hint="use --stream")
    # Batched models (max_batch_size > 0) take a leading batch dimension of 1.
    shape = (1, 1) if signature.max_batch_size > 0 else (1,)
    return [InputTensor(name=name, datatype=signature.inputs.get(name, _DEFAULT_DTYPES[name]),
                       shape=shape, values=(value,))
            for name, value in wanted.items()]
