"""What one request to the router or to an engine model asks for, parsed once at the edge.

A request arrives as named input arrays and request parameters
(:class:`~pdtrt.runtime.triton_io.Incoming`). Before anything is allocated or sent anywhere the
router turns it into a :class:`RouterRequest`, an engine model into an :class:`EngineRequest`
or a :class:`StopRequest` (TensorRT-LLM's stop contract); bad input is refused here, with an
:class:`~pdtrt.errors.InvalidRequestError` that becomes that request's error response and
nothing else. The rest of each model works on these frozen objects only. This module calls no
Triton API (the seam in :mod:`~pdtrt.runtime.triton_io` does) and holds no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pdtrt.build.manifest import KVLayout
from pdtrt.engine_io import REQUEST_TYPE_PARAMETER, ROUTER_IO, RequestType, Role
from pdtrt.errors import InvalidRequestError
from pdtrt.runtime.phase_params import ContextPhaseParams
from pdtrt.runtime.triton_io import Incoming

__all__ = ["EngineLimits", "EngineRequest", "RouterRequest", "SamplingParams", "StopRequest",
           "parse_engine_request", "parse_router_request"]

# Router inputs that arrive reshaped to [batch] and go to a phase in the config shape [batch, 1].
_ROUTER_SCALARS = frozenset(t.name for t in ROUTER_IO.inputs if t.reshape_scalar)
# Inputs a ``stop`` request carries: the engine config's required ones, then stop = true.
_STOP_INPUTS = ("input_ids", "input_lengths", "request_output_len")
_EMPTY_PROMPT = "the prompt is empty: 'text_input' / 'input_ids' has no tokens"


def _prompt(request: Incoming, empty: str) -> tuple[int, ...]:
    """The prompt: ``input_ids`` cut to ``input_lengths`` (the rest is padding)."""
    ids = request.tensor("input_ids")
    if ids is None or ids.size == 0:
        raise InvalidRequestError(empty)
    width = ids.shape[-1]
    n = int(request.scalar("input_lengths", width))
    if not 0 <= n <= width:
        raise InvalidRequestError(f"input_lengths {n} is outside 0..{width}, the number of "
                                  "input_ids given")
    return tuple(int(t) for t in ids.reshape(-1)[:n])


# -- the router ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RouterRequest:
    request_id: str  # the client's; the phases see it with a unique suffix
    prompt: tuple[int, ...]
    max_new_tokens: int
    streaming: bool  # what the client asked; the phases are asked their own way
    exclude_input: bool
    inputs: Mapping[str, np.ndarray]  # the client's inputs, in the phase models' config shapes

    def phase_inputs(self, *, streaming: bool, **extra: np.ndarray) -> dict[str, np.ndarray]:
        """A phase request's inputs: the client's, streaming or not, output without the prompt
        (the router adds the prompt itself when the client wants it), plus ``extra``."""
        return {**self.inputs, "streaming": np.array([[streaming]]),
                "exclude_input_in_output": np.array([[True]]), **extra}

    def stop_inputs(self) -> dict[str, np.ndarray]:
        """The inputs of TensorRT-LLM's stop request for this request's phases."""
        return {**{k: self.inputs[k] for k in _STOP_INPUTS if k in self.inputs},
                "stop": np.array([[True]])}


def parse_router_request(request: Incoming) -> RouterRequest:
    """Raises :class:`InvalidRequestError` for an empty prompt or bad ``input_lengths``."""
    prompt = _prompt(request, _EMPTY_PROMPT)
    if not prompt:
        raise InvalidRequestError(_EMPTY_PROMPT)
    return RouterRequest(
        request_id=request.request_id, prompt=prompt,
        max_new_tokens=int(request.scalar("request_output_len", required=True)),
        streaming=bool(request.scalar("streaming", False)),
        exclude_input=bool(request.scalar("exclude_input_in_output", False)),
        inputs={name: value.reshape(-1, 1) if name in _ROUTER_SCALARS else value
                for name, value in request.inputs.items()})


# -- the engine model ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """TensorRT-LLM's semantics: top_k 0 and top_p 0 (the defaults) mean greedy."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1 or (self.top_k == 0 and self.top_p == 0)


@dataclass(frozen=True, kw_only=True)
class EngineLimits:
    """What an engine model instance accepts."""

    role: Role
    max_input_len: int
    max_seq_len: int
    vocab_size: int
    layout: KVLayout  # KV a generation-only request brings must match it
    serves_phases: bool  # context-only / generation-only requests (prefill and decode roles)


@dataclass(frozen=True, kw_only=True)
class EngineRequest:
    request_id: str
    mode: RequestType
    prompt: tuple[int, ...]
    max_new_tokens: int
    end_id: int | None  # None: generate max_new_tokens whatever comes
    sampling: SamplingParams
    streaming: bool
    exclude_input: bool
    context_phase_params: ContextPhaseParams | None = None  # generation-only requests


@dataclass(frozen=True)
class StopRequest:
    """TensorRT-LLM's stop request: stop the request with this id (and free its held KV)."""

    request_id: str


def parse_engine_request(request: Incoming, limits: EngineLimits
                         ) -> EngineRequest | StopRequest:
    """Raises :class:`InvalidRequestError` for input the engine cannot serve, and
    :class:`~pdtrt.errors.KVTransferError` for malformed ``context_phase_params``."""
    if request.scalar("stop", False):
        if not request.request_id:
            raise InvalidRequestError("a stop request needs the request id of the request to "
                                      "stop")
        return StopRequest(request.request_id)
    prompt = _prompt(request, "input 'input_ids' is required and must not be empty")
    n = len(prompt)
    max_new = int(request.scalar("request_output_len", required=True))
    if not 0 < n <= limits.max_input_len:
        raise InvalidRequestError(f"prompt of {n} tokens; this engine takes "
                                  f"1..{limits.max_input_len}")
    if max_new < 1 or n + max_new > limits.max_seq_len:
        raise InvalidRequestError(f"request_output_len {max_new} with a {n}-token prompt "
                                  f"exceeds max_seq_len {limits.max_seq_len} (or is < 1)")
    if min(prompt) < 0 or max(prompt) >= limits.vocab_size:
        raise InvalidRequestError(f"input_ids outside the vocabulary [0, {limits.vocab_size})")
    mode = _mode(request, limits)
    end_id = request.scalar("end_id")
    return EngineRequest(
        request_id=request.request_id, mode=mode, prompt=prompt, max_new_tokens=max_new,
        end_id=None if end_id is None or int(end_id) < 0 else int(end_id),
        sampling=SamplingParams(temperature=float(request.scalar("temperature", 1.0)),
                                top_k=int(request.scalar("runtime_top_k", 0)),
                                top_p=float(request.scalar("runtime_top_p", 0.0)),
                                seed=int(request.scalar("random_seed", 0))),
        streaming=bool(request.scalar("streaming", False)),
        exclude_input=bool(request.scalar("exclude_input_in_output", False)),
        context_phase_params=(_context_phase_params(request, limits, n)
                              if mode is RequestType.GENERATION_ONLY else None))


def _mode(request: Incoming, limits: EngineLimits) -> RequestType:
    raw = request.parameters.get(REQUEST_TYPE_PARAMETER, RequestType.CONTEXT_AND_GENERATION)
    if raw not in tuple(RequestType):
        raise InvalidRequestError(f"unknown request_type '{raw}'")
    mode = RequestType(raw)
    if mode is not RequestType.CONTEXT_AND_GENERATION and not limits.serves_phases:
        raise InvalidRequestError(f"the {limits.role} model does not serve {mode} requests")
    return mode


def _context_phase_params(request: Incoming, limits: EngineLimits,
                          prompt_len: int) -> ContextPhaseParams:
    raw = request.tensor("context_phase_params")
    if raw is None:
        raise InvalidRequestError("generation_only requests need 'context_phase_params'")
    params = ContextPhaseParams.from_array(raw)
    if params.layout != limits.layout:
        raise InvalidRequestError(f"KV layout of the prefill ({params.layout}) differs from "
                                  f"this engine's ({limits.layout})")
    if params.prompt_len != prompt_len:
        raise InvalidRequestError(f"context_phase_params hold {params.prompt_len} tokens of KV "
                                  f"but the prompt has {prompt_len}")
    return params
