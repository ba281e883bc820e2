"""What one request to the router or to an engine model asks for, parsed once at the edge.

A request arrives as named input arrays and request parameters
(:class:`~pdtrt.runtime.triton_io.Incoming`). Before anything is allocated or sent anywhere the
router turns it into a :class:`RouterRequest`, an engine model into an :class:`EngineRequest`
or a :class:`StopRequest` (TensorRT-LLM's stop contract) or one of pdtrt's: a
:class:`KvEventsRequest` (a router's KV index asking for the blocks the engine holds) or a
:class:`DrainRequest` (docs/drain.md); bad input is refused
here, with an :class:`~pdtrt.errors.InvalidRequestError` that becomes that request's error
response and nothing else. The rest of each model works on these frozen objects only. This
module calls no Triton API (the seam in :mod:`~pdtrt.runtime.triton_io` does) and holds no
state.

Strict like TensorRT-LLM: sampling values outside TensorRT-LLM's own ranges, a beam width the
engine was not built for, ``input_lengths`` that disagree with ``input_ids`` and more than one
prompt per request are refused with a message naming the input, the value and what is allowed
(:func:`check_sampling`, :func:`one_prompt`) -- never served as if they were fine. The router
checks the same rules as the engine models, so a client gets the same message on every path.

Two inputs have two names (:data:`~pdtrt.engine_io.INPUT_ALIASES`: NVIDIA's current
``min_tokens`` / ``seed`` beside pdtrt's ``min_length`` / ``random_seed``). Both parsers first
rename the one given to the core name (:func:`canonical_inputs`) and refuse a request giving
both, so the rest of each model -- and the phases the router calls -- see the core name only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from pdtrt.engine_dir import KVLayout
from pdtrt.engine_io import (
    DRAIN_PARAMETER,
    INPUT_ALIASES,
    MAX_TOP_LOG_PROBS,
    REQUEST_TYPE_PARAMETER,
    ROUTER_IO,
    TIMING_INPUT,
    TOKEN_COUNT_TENSORS,
    TOP_LOG_PROBS_INPUT,
    DrainAction,
    RequestSampling,
    RequestType,
    Role,
)
from pdtrt.ensemble import ENGINE_STEP_MAP
from pdtrt.errors import InvalidRequestError
from pdtrt.runtime.phase_params import ContextPhaseParams
from pdtrt.runtime.triton_io import Incoming

__all__ = ["DISAGGREGATED_MAX_BEAM_WIDTH", "KV_EVENTS_CURSOR", "DrainRequest", "EngineLimits",
           "EngineRequest", "KvEventsRequest", "RouterRequest", "StopRequest", "canonical_inputs",
           "check_sampling", "one_prompt", "parse_engine_request", "parse_router_request",
           "word_list"]

# Router inputs that arrive reshaped to [batch] and go to a phase in the config shape [batch, 1].
_ROUTER_SCALARS = frozenset(t.name for t in ROUTER_IO.inputs if t.reshape_scalar)
# Inputs a ``stop`` request carries: the engine config's required ones, then stop = true.
_STOP_INPUTS = ("input_ids", "input_lengths", "request_output_len")
_EMPTY_PROMPT = "the prompt is empty: 'text_input' / 'input_ids' has no tokens"


def one_prompt(name: str, num_prompts: int) -> None:
    """Refuse a request carrying more than one prompt (``name`` has ``num_prompts`` rows):
    pdtrt's models serve one sequence per request, end to end."""
    if num_prompts > 1:
        raise InvalidRequestError(f"input '{name}' holds {num_prompts} prompts; pdtrt serves one "
                                  "prompt per request: send each prompt as its own request")


def canonical_inputs(request: Incoming) -> Incoming:
    """``request`` with each aliased input under its core name (``min_tokens`` ->
    ``min_length``, ``seed`` -> ``random_seed``). Raises :class:`InvalidRequestError` naming
    both when a request gives both names of one input (even with equal values: which one was
    meant cannot be told)."""
    given = [alias for alias in INPUT_ALIASES if alias in request.inputs]
    if not given:
        return request
    for alias in given:
        core = INPUT_ALIASES[alias]
        if core in request.inputs:
            raise InvalidRequestError(
                f"inputs '{core}' and '{alias}' are both given; they are two names of one "
                f"input ('{alias}' is NVIDIA's current name, '{core}' pdtrt's older one): "
                "send one of them")
    inputs = {INPUT_ALIASES.get(name, name): value for name, value in request.inputs.items()}
    return replace(request, inputs=inputs)


def _prompt(request: Incoming, empty: str) -> tuple[int, ...]:
    """The prompt: the one row of ``input_ids``, which ``input_lengths`` must count exactly."""
    ids = request.tensor("input_ids")
    if ids is None or ids.size == 0:
        raise InvalidRequestError(empty)
    one_prompt("input_ids", ids.shape[0] if ids.ndim > 1 else 1)
    width = ids.shape[-1]
    lengths = request.tensor("input_lengths")
    if lengths is not None and lengths.size > 1:
        one_prompt("input_lengths", lengths.size)
    n = int(request.scalar("input_lengths", width))
    if n != width:
        raise InvalidRequestError(f"input 'input_lengths' is {n} but 'input_ids' holds {width} "
                                  f"tokens; allowed: exactly {width}")
    return tuple(ids.reshape(-1).tolist())  # Python ints


# -- sampling: TensorRT-LLM's rules ---------------------------------------------------------------
# The ranges are TensorRT-LLM's own checks of a request's sampling configuration, in
# cpp/tensorrt_llm/executor/samplingConfig.cpp (checkBeamWidth, checkTopK, checkTopP,
# checkTemperature, checkRepetitionPenalty, checkLengthPenalty, checkMinTokens) at NVIDIA/
# TensorRT-LLM commit 3585984b32cded5cc002d3087d3da4b0fd9fb8a5: temperature >= 0 (0 allowed:
# greedy), top_k >= 0, top_p in (0, 1], repetition_penalty > 0, length penalty >= 0, min tokens
# >= 0, beam width >= 1; presence and frequency penalties are not range-checked there. Its
# Triton backend turns a top_p <= 0 into "no top_p" before that check
# (triton_backend/inflight_batcher_llm/src/utils.cc, getSamplingConfigFromTensors, commit
# 192908136e53ddfc2f282e81e6ecdb76af06eb50), so top_p 0 means "none" here too; pdtrt refuses a
# negative top_p instead of ignoring it. Stricter than TensorRT-LLM on one point: NaN and
# infinity are refused for every floating-point input (TensorRT-LLM's checks let +inf through).
# The beam width must also fit the engine: TensorRT-LLM refuses one above the engine's
# max_beam_width (batch_manager/trtGptModelInflightBatching.cpp, changeBeamWidth, commit
# b35ac1b64368513d215c57d2ed01d62d910df8da).
@dataclass(frozen=True)
class _Range:
    name: str  # the engine model's (and router's) input
    allowed: str  # what the message says is allowed
    ok: Callable[[float], bool]


_finite = math.isfinite
_SAMPLING_RANGES = (
    _Range("temperature", "a finite number >= 0", lambda v: _finite(v) and v >= 0),
    _Range("runtime_top_k", ">= 0", lambda v: v >= 0),
    _Range("runtime_top_p", "(0, 1], or 0 for none", lambda v: v == 0 or 0 < v <= 1),
    _Range("repetition_penalty", "a finite number > 0", lambda v: _finite(v) and v > 0),
    _Range("len_penalty", "a finite number >= 0", lambda v: _finite(v) and v >= 0),
    _Range("min_length", ">= 0", lambda v: v >= 0),
    _Range("presence_penalty", "a finite number", _finite),
    _Range("frequency_penalty", "a finite number", _finite),
)
DISAGGREGATED_MAX_BEAM_WIDTH = 1
"""The beam width of every engine behind the router: pdtrt builds each phase with
``max_beam_width`` 1 (disaggregated serving needs beam width 1; pdtrt.blueprint.settings)."""
# The ensemble's name of each engine input, for the message (``top_p`` for ``runtime_top_p``).
_ENSEMBLE_NAME = {engine: ensemble for engine, ensemble in ENGINE_STEP_MAP.inputs}


def _input_name(name: str) -> str:
    alias = _ENSEMBLE_NAME.get(name, name)
    return f"'{name}'" if alias == name or alias.startswith("_") else \
        f"'{name}' (the ensemble's '{alias}')"


def _refuse(name: str, value: object, allowed: str) -> InvalidRequestError:
    # The inputs are FP32: shown as such (1.3, not 1.2999999523162842).
    shown = str(np.float32(value)) if isinstance(value, float) else value
    return InvalidRequestError(f"input {_input_name(name)} is {shown}; allowed: {allowed}")


def check_sampling(request: Incoming, *, max_beam_width: int) -> None:
    """Refuse sampling inputs TensorRT-LLM refuses (the rules above) and a ``beam_width``
    outside ``1..max_beam_width``. Raises :class:`InvalidRequestError` naming the input, the
    value and what is allowed; absent inputs are fine."""
    for rule in _SAMPLING_RANGES:
        value = request.scalar(rule.name)
        if value is not None and not rule.ok(value):
            raise _refuse(rule.name, value, rule.allowed)
    beam = request.scalar("beam_width")
    if beam is not None and not 1 <= beam <= max_beam_width:
        raise _refuse("beam_width", beam, f"1..{max_beam_width} (the engine's max_beam_width)")
    top = request.scalar(TOP_LOG_PROBS_INPUT)
    if top is not None and not 0 <= top <= MAX_TOP_LOG_PROBS:
        raise _refuse(TOP_LOG_PROBS_INPUT, top, f"0..{MAX_TOP_LOG_PROBS} (alternatives per "
                      "token)")
    if top and not request.scalar("return_log_probs", False):
        raise InvalidRequestError(f"input '{TOP_LOG_PROBS_INPUT}' is {top}; it needs "
                                  "'return_log_probs' true (the alternatives come with the "
                                  "tokens' log-probabilities)")


@dataclass(frozen=True)
class TokenCounts:
    """Which of NVIDIA's token counts a request's responses carry (``return_num_input_tokens``
    / ``return_num_output_tokens``)."""

    prompt: bool = False
    output: bool = False

    def of(self, prompt_tokens: int, response_tokens: int) -> tuple[int | None, int | None]:
        """(the prompt's, this response's), None where not asked."""
        return (prompt_tokens if self.prompt else None,
                response_tokens if self.output else None)


def token_counts(request: Incoming) -> TokenCounts:
    return TokenCounts(prompt=bool(request.scalar("return_num_input_tokens", False)),
                       output=bool(request.scalar("return_num_output_tokens", False)))


# -- the router ----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RouterRequest:
    request_id: str  # the client's; the phases see it with a unique suffix
    prompt: tuple[int, ...]
    max_new_tokens: int
    streaming: bool  # what the client asked; the phases are asked their own way
    exclude_input: bool
    return_log_probs: bool = False
    num_top_log_probs: int = 0  # TOP_LOG_PROBS_INPUT: alternatives per token, from the phases
    return_timing: bool = False  # TIMING_INPUT: the timing on the final response
    counts: TokenCounts = TokenCounts()  # the router counts; its phases are not asked
    stop_words: tuple[tuple[int, ...], ...] = ()  # the router ends a prefill that completes one
    inputs: Mapping[str, np.ndarray]  # the client's inputs, in the phase models' config shapes
    # the last tokens of ``prompt`` that are output already sent to the client: a continuation
    # after a migration (:meth:`continued`); 0 for the client's own request
    num_generated: int = 0

    @property
    def client_prompt(self) -> tuple[int, ...]:
        """The prompt the client sent (``prompt`` less the output a continuation carries)."""
        return self.prompt[:len(self.prompt) - self.num_generated]

    def continued(self, sent: Sequence[int]) -> RouterRequest:
        """The request that goes on from the client's output so far (``sent``: every output
        token the client has, from position 0): the client's prompt followed by ``sent`` as
        its prompt, the rest of ``max_tokens`` to generate, and ``min_length`` less what is
        out -- the same sampling, stop words and seed otherwise. Penalties and stop words see
        the same tokens (the engines count the prompt and the output alike), and the
        reference engine keys a seeded draw by its position in the sequence, so the
        continuation generates what the uninterrupted request would have."""
        prompt = (*self.client_prompt, *sent)
        remaining = self.max_new_tokens + self.num_generated - len(sent)
        inputs = {**self.inputs,
                  "input_ids": np.array([prompt], dtype=self.inputs["input_ids"].dtype),
                  "input_lengths": _like(self.inputs.get("input_lengths"), len(prompt)),
                  "request_output_len": _like(self.inputs["request_output_len"], remaining)}
        if "min_length" in self.inputs:
            out = len(sent)
            inputs["min_length"] = _like(self.inputs["min_length"], max(
                0, int(self.inputs["min_length"].reshape(-1)[0]) + self.num_generated - out))
        return replace(self, prompt=prompt, max_new_tokens=remaining, inputs=inputs,
                       num_generated=len(sent))

    def phase_inputs(self, *, streaming: bool, **extra: np.ndarray) -> dict[str, np.ndarray]:
        """A phase request's inputs: the client's, streaming or not, output without the prompt
        (the router adds the prompt itself when the client wants it), plus ``extra``."""
        return {**self.inputs, "streaming": np.array([[streaming]]),
                "exclude_input_in_output": np.array([[True]]), **extra}

    def stop_inputs(self) -> dict[str, np.ndarray]:
        """The inputs of TensorRT-LLM's stop request for this request's phases."""
        return {**{k: self.inputs[k] for k in _STOP_INPUTS if k in self.inputs},
                "stop": np.array([[True]])}


def _like(template: np.ndarray | None, value: int) -> np.ndarray:
    """``value`` in ``template``'s shape and dtype (a [1, 1] int32 when there is none)."""
    if template is None:
        return np.array([[value]], dtype=np.int32)
    return np.full(template.shape, value, dtype=template.dtype)


def parse_router_request(request: Incoming) -> RouterRequest | StopRequest:
    """A request to route, or TensorRT-LLM's stop request (``stop`` = true: stop the request
    with this id). Raises :class:`InvalidRequestError` for a stop without a request id, an
    empty prompt, more than one prompt, ``input_lengths`` that disagree with ``input_ids``,
    sampling inputs the engines refuse (:func:`check_sampling`, the engines' beam width being
    :data:`DISAGGREGATED_MAX_BEAM_WIDTH`) and a malformed ``stop_words_list`` (:func:`word_list`;
    its token ids are left to the engines, which know the vocabulary)."""
    if stop := _stop_request(request):
        return stop
    request = canonical_inputs(request)
    prompt = _prompt(request, _EMPTY_PROMPT)
    check_sampling(request, max_beam_width=DISAGGREGATED_MAX_BEAM_WIDTH)
    return RouterRequest(
        request_id=request.request_id, prompt=prompt,
        max_new_tokens=int(request.scalar("request_output_len", required=True)),
        streaming=bool(request.scalar("streaming", False)),
        exclude_input=bool(request.scalar("exclude_input_in_output", False)),
        return_log_probs=bool(request.scalar("return_log_probs", False)),
        num_top_log_probs=int(request.scalar(TOP_LOG_PROBS_INPUT, 0)),
        return_timing=bool(request.scalar(TIMING_INPUT, False)),
        counts=token_counts(request),
        stop_words=word_list(request, "stop_words_list"),
        inputs={name: value.reshape(-1, 1) if name in _ROUTER_SCALARS else value
                for name, value in request.inputs.items()
                if name not in TOKEN_COUNT_TENSORS and name != TIMING_INPUT})


# -- the engine model ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class EngineLimits:
    """What an engine model instance accepts."""

    role: Role
    max_input_len: int
    max_seq_len: int
    vocab_size: int
    layout: KVLayout | None = None  # the engine checks the KV layout itself when it pulls
    serves_phases: bool  # context-only / generation-only requests (prefill and decode roles)
    max_beam_width: int = 1


@dataclass(frozen=True, kw_only=True)
class EngineRequest:
    request_id: str
    mode: RequestType
    prompt: tuple[int, ...]
    max_new_tokens: int
    end_id: int | None  # None: generate max_new_tokens whatever comes
    sampling: RequestSampling
    streaming: bool
    exclude_input: bool
    counts: TokenCounts = TokenCounts()
    context_phase_params: ContextPhaseParams | None = None  # generation-only requests


@dataclass(frozen=True)
class StopRequest:
    """TensorRT-LLM's stop request: stop the request with this id (a finished one is left as
    it is; so is the KV it holds, until its transfer timeout)."""

    request_id: str


def _stop_request(request: Incoming) -> StopRequest | None:
    if not request.scalar("stop", False):
        return None
    if not request.request_id:
        raise InvalidRequestError("a stop request needs the request id of the request to stop")
    return StopRequest(request.request_id)


@dataclass(frozen=True)
class DrainRequest:
    """pdtrt's drain request (the request parameter :data:`~pdtrt.engine_io.DRAIN_PARAMETER`:
    start a drain, end it, or only ask how far it is; :mod:`pdtrt.runtime.engine.drain`). It
    carries the inputs of a health probe besides and never reaches the engine."""

    action: DrainAction


def _drain_request(request: Incoming) -> DrainRequest | None:
    value = request.parameters.get(DRAIN_PARAMETER)
    if value is None:
        return None
    try:
        return DrainRequest(DrainAction(str(value)))
    except ValueError:
        raise InvalidRequestError(
            f"request parameter {DRAIN_PARAMETER!r} is {value!r}; it takes one of: "
            + ", ".join(a.value for a in DrainAction)) from None


KV_EVENTS_CURSOR = "kv_events_cursor"  # the input that makes a request a KvEventsRequest


@dataclass(frozen=True)
class KvEventsRequest:
    """pdtrt's KV-events request: the blocks the engine holds, as changes since ``cursor``
    (``EPOCH:SEQ``) or a snapshot (:mod:`pdtrt.runtime.engine.kv_events`). It carries the
    inputs of a health probe besides (Triton requires them) and never reaches the engine."""

    cursor: str


def parse_engine_request(request: Incoming, limits: EngineLimits
                         ) -> EngineRequest | StopRequest | KvEventsRequest | DrainRequest:
    """Raises :class:`InvalidRequestError` for input the engine cannot serve, and
    :class:`~pdtrt.errors.KVTransferError` for malformed ``context_phase_params``."""
    if drain := _drain_request(request):
        return drain
    if (cursor := request.scalar(KV_EVENTS_CURSOR)) is not None:
        return KvEventsRequest(cursor.decode() if isinstance(cursor, bytes) else str(cursor))
    if stop := _stop_request(request):
        return stop
    request = canonical_inputs(request)
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
    check_sampling(request, max_beam_width=limits.max_beam_width)
    mode = _mode(request, limits)
    end_id = request.scalar("end_id")
    return EngineRequest(
        request_id=request.request_id, mode=mode, prompt=prompt, max_new_tokens=max_new,
        end_id=None if end_id is None or int(end_id) < 0 else int(end_id),
        sampling=RequestSampling(
            temperature=float(request.scalar("temperature", 1.0)),
            top_k=int(request.scalar("runtime_top_k", 0)),
            top_p=float(request.scalar("runtime_top_p", 0.0)),
            seed=None if (seed := request.scalar("random_seed")) is None else int(seed),
            repetition_penalty=float(request.scalar("repetition_penalty", 1.0)),
            presence_penalty=float(request.scalar("presence_penalty", 0.0)),
            frequency_penalty=float(request.scalar("frequency_penalty", 0.0)),
            min_tokens=int(request.scalar("min_length", 0)),
            stop_words=word_list(request, "stop_words_list", limits.vocab_size),
            bad_words=word_list(request, "bad_words_list", limits.vocab_size),
            return_log_probs=bool(request.scalar("return_log_probs", False)),
            num_top_log_probs=int(request.scalar(TOP_LOG_PROBS_INPUT, 0))),
        streaming=bool(request.scalar("streaming", False)),
        exclude_input=bool(request.scalar("exclude_input_in_output", False)),
        counts=token_counts(request),
        context_phase_params=(_context_phase_params(request, limits, n)
                              if mode is RequestType.GENERATION_ONLY else None))


def word_list(request: Incoming, name: str,
              vocab_size: int | None = None) -> tuple[tuple[int, ...], ...]:
    """The words of a ``stop_words_list`` / ``bad_words_list`` input, in TensorRT-LLM's layout
    ``[1, 2, n]``: row 0 the words' token ids one after another, row 1 the end offset of each
    word, padded with -1 (NVIDIA's preprocessing builds it from ``stop_words`` /
    ``bad_words``). Refused: another shape, offsets that do not rise within row 0, token ids
    outside the vocabulary (``vocab_size``; None, for the router: not checked here)."""
    raw = request.tensor(name)
    if raw is None or raw.size == 0:
        return ()
    lists = raw.reshape(-1, *raw.shape[-2:]) if raw.ndim >= 2 else raw.reshape(1, 1, -1)
    if lists.shape[0] != 1 or lists.shape[1] != 2:
        raise InvalidRequestError(f"input '{name}' has shape {list(raw.shape)}; allowed: "
                                  "[1, 2, n] (token ids, then each word's end offset, -1 padded)")
    ids, offsets = lists[0, 0].tolist(), [int(o) for o in lists[0, 1].tolist() if o >= 0]
    words, start = [], 0
    for end in offsets:
        if not start < end <= len(ids):
            raise InvalidRequestError(f"input '{name}': word end offset {end} after {start} "
                                      f"does not fit its {len(ids)} token ids")
        word = tuple(int(t) for t in ids[start:end])
        if vocab_size is not None and (min(word) < 0 or max(word) >= vocab_size):
            raise InvalidRequestError(f"input '{name}': token ids {list(word)} outside the "
                                      f"vocabulary [0, {vocab_size})")
        words.append(word)
        start = end
    return tuple(words)


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
    if params.prompt_len != prompt_len:
        raise InvalidRequestError(f"context_phase_params hold {params.prompt_len} tokens of KV "
                                  f"but the prompt has {prompt_len}")
    return params
