"""The engine model's I/O contract, and the request that crosses it, as small typed tables.

The *core* contract every engine model implements (:data:`CORE_ENGINE_IO`: TensorRT-LLM's
``tensorrt_llm`` model's names, dtypes and dims, from ``triton_backend/all_models/
inflight_batcher_llm/tensorrt_llm/config.pbtxt``), pdtrt's own engine model
(:data:`REFERENCE_ENGINE_IO`) and its router (:data:`ROUTER_IO`: the core contract minus
``context_phase_params``, so the ensemble wiring is the same whichever model sits in the
middle); the request parameter that selects the phase; the ``pdtrt_role`` / parameter names
the Python models read from their ``config.pbtxt``; and :class:`RequestSampling`, the sampling
settings of one request as they cross that process boundary: built from an OpenAI body by the
front, sent as the core inputs (:meth:`RequestSampling.inputs`), read back by the engine model
and the router (:func:`pdtrt.runtime.request_parsing.parse_engine_request`) and turned into
the LLM API's ``SamplingParams`` in one place (``runtime.engine.model``). NVIDIA's ensemble now
names two core inputs ``min_tokens``/``seed``, so pdtrt's ensemble, router and engine models
accept either name of each (:data:`INPUT_ALIASES`; one request giving both is refused). The
models around the engine model and the wiring per target are :mod:`pdtrt.ensemble`'s.
Dims exclude the batch dimension (every model has ``max_batch_size > 0``). This module is data:
it renders nothing and reads no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pdtrt.enums import Phase

__all__ = [
    "CORE_ENGINE_IO",
    "ERROR_OUTPUT",
    "DRAINING",
    "DRAIN_OUTPUT",
    "DRAIN_PARAMETER",
    "DrainAction",
    "PROBE_ID_PREFIX",
    "KV_EVENTS_OUTPUT",
    "KV_EVENT_BUFFER",
    "KV_TRANSFER_DEADLINE_MARGIN_S",
    "ENSEMBLE_NAME",
    "AGGREGATED_ENSEMBLE_NAME",
    "INPUT_ALIASES",
    "TOKEN_COUNT_TENSORS",
    "PHASE_ROLES",
    "READINESS_PATH",
    "REQUEST_TYPE_PARAMETER",
    "TIMING_INPUT",
    "TIMING_OUTPUT",
    "MAX_TOP_LOG_PROBS",
    "TOP_LOG_PROBS_INPUT",
    "TOP_LOG_PROBS_OUTPUT",
    "TOP_LOG_PROB_IDS_OUTPUT",
    "TopLogProbs",
    "top_log_prob_outputs",
    "top_log_probs_of",
    "REFERENCE_ENGINE_IO",
    "ROUTER_IO",
    "ModelIO",
    "ModelName",
    "Param",
    "RequestSampling",
    "RequestType",
    "Role",
    "TensorSpec",
    "TritonDType",
    "scalar_spec",
    "tensor_spec",
]


class TritonDType(StrEnum):
    """``data_type`` values of Triton's model config (``model_config.proto``)."""

    BOOL = "TYPE_BOOL"
    UINT8 = "TYPE_UINT8"
    INT32 = "TYPE_INT32"
    INT64 = "TYPE_INT64"
    UINT64 = "TYPE_UINT64"
    FP16 = "TYPE_FP16"
    BF16 = "TYPE_BF16"
    FP32 = "TYPE_FP32"
    STRING = "TYPE_STRING"

    @property
    def numpy_name(self) -> str:
        """The numpy dtype name the Python backend uses (``object`` for strings; bf16 has none)."""
        return _NUMPY[self]


_NUMPY = {
    TritonDType.BOOL: "bool", TritonDType.UINT8: "uint8", TritonDType.INT32: "int32",
    TritonDType.INT64: "int64", TritonDType.UINT64: "uint64", TritonDType.FP16: "float16",
    TritonDType.BF16: "bfloat16", TritonDType.FP32: "float32", TritonDType.STRING: "object",
}


@dataclass(frozen=True, kw_only=True)
class TensorSpec:
    """One input or output. ``dims`` exclude the batch dim; -1 is a variable dim.

    ``reshape_scalar`` renders ``dims: [ 1 ]`` plus ``reshape: { shape: [ ] }`` (NVIDIA's
    scalars on the engine model: the model sees shape ``[batch]``); ``ragged`` renders
    ``allow_ragged_batch: true``.
    """

    name: str
    dtype: TritonDType
    dims: tuple[int, ...]
    optional: bool = False
    reshape_scalar: bool = False
    ragged: bool = False


@dataclass(frozen=True, kw_only=True)
class ModelIO:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        return _find(self.inputs, name, "input")

    def output(self, name: str) -> TensorSpec:
        return _find(self.outputs, name, "output")

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def without(self, *names: str) -> ModelIO:
        """The same table minus the tensors called ``names`` (inputs and outputs)."""
        return ModelIO(inputs=tuple(t for t in self.inputs if t.name not in names),
                       outputs=tuple(t for t in self.outputs if t.name not in names))


def _find(tensors: tuple[TensorSpec, ...], name: str, kind: str) -> TensorSpec:
    for t in tensors:
        if t.name == name:
            return t
    raise KeyError(f"no {kind} named {name!r}")


def tensor_spec(name: str, dtype: TritonDType, *dims: int, opt: bool = False, ragged: bool = False,
       scalar: bool = False) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, dims=dims, optional=opt, ragged=ragged,
                      reshape_scalar=scalar)


def scalar_spec(name: str, dtype: TritonDType, *, opt: bool = True) -> TensorSpec:
    """An engine-model scalar: ``dims: [1]`` reshaped to ``[]`` (the batch dim stays)."""
    return tensor_spec(name, dtype, 1, opt=opt, scalar=True)


B, U8, I32, I64, U64 = (TritonDType.BOOL, TritonDType.UINT8, TritonDType.INT32,
                        TritonDType.INT64, TritonDType.UINT64)
F16, F32, STR = TritonDType.FP16, TritonDType.FP32, TritonDType.STRING


class ModelName(StrEnum):
    """Model (directory) names in a pdtrt repository."""

    ENSEMBLE = "ensemble"
    ENSEMBLE_AGGREGATED = "ensemble_aggregated"
    PREPROCESSING = "preprocessing"
    ROUTER = "router"
    PREFILL = "prefill"
    DECODE = "decode"
    AGGREGATED = "aggregated"
    POSTPROCESSING = "postprocessing"
    HEALTH = "health"  # readiness marker: loaded only while a full path can serve


ENSEMBLE_NAME = ModelName.ENSEMBLE
AGGREGATED_ENSEMBLE_NAME = ModelName.ENSEMBLE_AGGREGATED


class Role(StrEnum):
    """The ``pdtrt_role`` parameter of each pdtrt Python model.

    A role is a *model's* job, a :class:`~pdtrt.enums.Phase` a *step of inference*; the two are
    related here and nowhere else. The **phase models** are the engine models the router calls
    (:data:`PHASE_ROLES`): ``prefill`` serves the prefill phase alone (context-only requests)
    and ``decode`` the decode phase alone (generation-only requests) -- :attr:`phase` -- while
    ``aggregated`` serves both in one request, so it has no single phase. The other roles are
    not engines.
    """

    PREFILL = "prefill"
    DECODE = "decode"
    AGGREGATED = "aggregated"
    ROUTER = "router"
    PREPROCESSING = "preprocessing"
    POSTPROCESSING = "postprocessing"

    @property
    def phase(self) -> Phase | None:
        """The one phase this role's model serves (prefill -> prefill, decode -> decode);
        None for ``aggregated`` (both phases) and for the roles that are not engines."""
        return _PHASE_OF_ROLE.get(self)

    @classmethod
    def serving(cls, phase: Phase) -> Role:
        """The role whose model serves ``phase`` alone."""
        return _ROLE_OF_PHASE[phase]


PHASE_ROLES = (Role.PREFILL, Role.DECODE, Role.AGGREGATED)
"""The roles of the phase models (the engine models), in the order of the router's pools."""

_PHASE_OF_ROLE = {Role.PREFILL: Phase.PREFILL, Role.DECODE: Phase.DECODE}
_ROLE_OF_PHASE = {phase: role for role, phase in _PHASE_OF_ROLE.items()}


class RequestType(StrEnum):
    """Values of the ``request_type`` request parameter (TensorRT-LLM's own names)."""

    CONTEXT_ONLY = "context_only"
    GENERATION_ONLY = "generation_only"
    CONTEXT_AND_GENERATION = "context_and_generation"


REQUEST_TYPE_PARAMETER = "request_type"
"""Request parameter (``pb_utils.InferenceRequest(parameters=...)``) selecting the phase; absent
means ``context_and_generation``. The C++ backend logs and treats unknown values likewise."""

TRACEPARENT_PARAMETER = "traceparent"
"""W3C Trace Context ``traceparent`` of the caller's span, as a request parameter: set by a
tritonclient caller or the OpenAI front for the router, by the router for each phase call
(docs/tracing.md); read only by a process that traces."""

TIMING_INPUT = "return_timing"
"""The router's optional input (BOOL) asking for the request's timing: where its time to first
token went (docs/serve.md, "Per-request timing"). An input, not a request parameter, and the
answer an output, not a response parameter: Triton 2.51's Python backend cannot set response
parameters (``InferenceResponse(parameters=...)`` came in a later release)."""
TIMING_OUTPUT = "pdtrt_timing"
"""The router's output that answers :data:`TIMING_INPUT`: on the final response only, the timing
as one JSON object (milliseconds; :mod:`pdtrt.runtime.router.timing`)."""


TOP_LOG_PROBS_INPUT = "num_top_log_probs"
"""pdtrt's optional input (INT32 ``[1]``) of its engine models and router: how many of the most
likely tokens to return at each output position, with their log-probabilities, besides the
chosen token's own (``output_log_probs``). 0 (or absent): none; needs ``return_log_probs``;
at most :data:`MAX_TOP_LOG_PROBS`. The engine model passes it to the LLM API as
``SamplingParams.logprobs = k`` (TensorRT-LLM's top-k log-probabilities, one
``{token: Logprob(logprob, rank)}`` per output token). NVIDIA's ``tensorrt_llm`` model has no
such input or output (its log-prob outputs are ``output_log_probs`` / ``cum_log_probs`` only:
``triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt``), so the names are
pdtrt's own, in NVIDIA's style; TensorRT-LLM 0.21's model does not declare them."""
TOP_LOG_PROBS_OUTPUT = "output_top_log_probs"
"""FP32 ``[beam, tokens, k]``: for each token of the response, the log-probabilities of the
``k`` most likely tokens at its position, best first (the answer to :data:`TOP_LOG_PROBS_INPUT`;
a slot the engine did not fill is NaN)."""
TOP_LOG_PROB_IDS_OUTPUT = "output_top_log_prob_ids"
"""INT32 ``[beam, tokens, k]``: the token ids of :data:`TOP_LOG_PROBS_OUTPUT`, -1 where unfilled."""
MAX_TOP_LOG_PROBS = 20
"""The most alternatives per token pdtrt serves. OpenAI caps ``top_logprobs`` at 20, and so does
TensorRT-LLM from PR #13520 on (``_MAX_TOP_LOGPROBS = 20`` in ``tensorrt_llm/sampling_params.py``,
merged to main 2026-04-27, after 1.2.1; 1.2.1 itself has no cap below the vocabulary, where its
TorchSampler's ``torch.topk`` fails). Refused above, by the engine model and the router."""

TopLogProbs = tuple[tuple[int, float], ...]
"""The alternatives at one output position: (token id, log-probability) pairs, best first."""


def top_log_prob_outputs(rows: Any, k: int) -> dict[str, Any]:
    """:data:`TOP_LOG_PROBS_OUTPUT` and :data:`TOP_LOG_PROB_IDS_OUTPUT` (``[1, len(rows), k]``)
    of one response whose tokens have the alternatives ``rows`` (a sequence of
    :data:`TopLogProbs`); a row shorter than ``k`` is padded (id -1, NaN)."""
    import numpy as np

    ids = np.full((1, len(rows), k), -1, dtype=np.int32)
    values = np.full((1, len(rows), k), np.nan, dtype=np.float32)
    for i, row in enumerate(rows):
        for j, (token, logprob) in enumerate(row[:k]):
            ids[0, i, j], values[0, i, j] = token, logprob
    return {TOP_LOG_PROBS_OUTPUT: values, TOP_LOG_PROB_IDS_OUTPUT: ids}


def top_log_probs_of(outputs: Any) -> list[TopLogProbs] | None:
    """The alternatives of each token of a response (its ``outputs``: name -> array), or None
    when it has none; the padding of :func:`top_log_prob_outputs` is dropped."""
    values, ids = outputs.get(TOP_LOG_PROBS_OUTPUT), outputs.get(TOP_LOG_PROB_IDS_OUTPUT)
    if values is None or ids is None:
        return None
    k = ids.shape[-1] if ids.ndim else 0
    if not k:
        return []
    return [tuple((int(t), float(v)) for t, v in zip(row_ids, row_values, strict=True) if t >= 0)
            for row_ids, row_values in zip(ids.reshape(-1, k).tolist(),
                                           values.reshape(-1, k).tolist(), strict=True)]


# How much later than the KV's hold (kv_transfer.timeout_s) the router gives up on a decode that
# has sent nothing (Param.KV_TRANSFER_DEADLINE_S): by then the decode's own
# kv_transfer_timeout_ms has failed a transfer that could fail, so silence means a transfer that
# never ends (TensorRT-LLM #12542)
KV_TRANSFER_DEADLINE_MARGIN_S = 10.0


class Param(StrEnum):
    """String parameters of pdtrt's Python models (``config.pbtxt`` ``parameters``)."""

    ROLE = "pdtrt_role"
    # engine models (prefill, decode, aggregated)
    ENGINE_DIR = "engine_dir"
    MAX_BATCH_SIZE = "max_batch_size"
    MAX_NUM_TOKENS = "max_num_tokens"
    MAX_INPUT_LEN = "max_input_len"
    MAX_SEQ_LEN = "max_seq_len"
    TOKENS_PER_BLOCK = "tokens_per_block"
    ENABLE_BLOCK_REUSE = "enable_block_reuse"  # "true" | "false": KV block reuse and events
    SAMPLER_TYPE = "sampler_type"  # LlmArgs' sampler_type: "TRTLLMSampler" | "TorchSampler"
    KV_TRANSFER_TIMEOUT_S = "kv_transfer_timeout_s"
    STREAM_INTERVAL = "stream_interval"  # LlmArgs' stream_interval (decode and aggregated)
    UCX_TLS = "ucx_tls"  # comma-joined UCX transports
    # pdtrt's LLM-API engine model (target trtllm-1.2): the checkpoint the LLM API loads and
    # the phase's LLM-API options file (extra_llm_api_options YAML) that ``pdtrt build`` wrote
    LLM_MODEL = "llm_model"
    LLM_OPTIONS = "llm_options"
    # per instance the GPU ordinals it owns, ";" between instances, "," within one ("0;1"):
    # instance k of the LLM-API engine model sets CUDA_VISIBLE_DEVICES to its entry
    GPU_DEVICE_IDS = "gpu_device_ids"
    # preprocessing / postprocessing
    TOKENIZER_DIR = "tokenizer_dir"
    # router
    PREFILL_MODEL = "prefill_model"
    DECODE_MODEL = "decode_model"
    AGGREGATED_MODEL = "aggregated_model"  # empty string when the repository has none
    AGGREGATED_BELOW_TOKENS = "aggregated_below_tokens"
    EARLY_FIRST_TOKEN = "early_first_token"  # "true" | "false"
    PREFILL_URL = "prefill_url"  # gRPC HOST:PORT of a remote prefill pool; "" = this server
    DECODE_URL = "decode_url"  # likewise for the decode pool
    ERROR_OUTPUT = "phase_error_output"  # output carrying in-band phase errors; "" = none
    # router pools of several endpoints (pdtrt.runtime.router.pool): "MODEL[@HOST:PORT][*N]",
    # comma-separated; "" when the pool has one (then *_MODEL and *_URL name it)
    PREFILL_ENDPOINTS = "prefill_endpoints"
    DECODE_ENDPOINTS = "decode_endpoints"
    AGGREGATED_ENDPOINTS = "aggregated_endpoints"
    FALLBACK_TO_AGGREGATED = "fallback_to_aggregated"  # "true" | "false"
    MAX_ATTEMPTS = "max_attempts"  # endpoints tried per phase of one request
    MAX_MIGRATIONS = "max_migrations"  # continuations of one request after a mid-stream failure
    LIVENESS_S = "liveness_s"  # silence of a phase call before its endpoint is probed
    # a generation-only call's first response at most this late (the KV transfer's bound)
    KV_TRANSFER_DEADLINE_S = "kv_transfer_deadline_s"
    PROBE_TIMEOUT_S = "probe_timeout_s"
    PROBE_INTERVAL_S = "probe_interval_s"  # background health checks; 0 = none
    # core input -> the phase models' name for it, "CORE:ENGINE,..."; "" = the core names
    # (TensorRT-LLM 0.21's model calls min_length / random_seed min_tokens / seed)
    PHASE_INPUT_NAMES = "phase_input_names"
    # "bls" | "grpc": how the router calls the phase models of its own server (grpc: at the
    # address in PDTRT_SERVER_GRPC_URL, which the server's launcher sets)
    PHASE_TRANSPORT = "phase_transport"
    # conditional disaggregation (pdtrt.prefill_policy): net-new prompts up to
    # MAX_LOCAL_PREFILL_TOKENS, or any prompt while every prefill endpoint has at least
    # MAX_PREFILL_QUEUE_DEPTH calls per instance, are prefilled by the decode endpoint itself
    # if at most LOCAL_PREFILL_LIMIT tokens (the decode engine's max_num_tokens); "0" = off
    MAX_LOCAL_PREFILL_TOKENS = "max_local_prefill_tokens"
    MAX_PREFILL_QUEUE_DEPTH = "max_prefill_queue_depth"
    LOCAL_PREFILL_LIMIT = "local_prefill_limit"
    # how a pool's endpoint is chosen (pdtrt.runtime.router.pool.Routing): "least_load",
    # "round_robin" or "kv_aware" -- by a cost of the prompt's net-new tokens there (its KV
    # index, fed by the engines' KV events every KV_EVENTS_INTERVAL_S) times KV_OVERLAP_WEIGHT
    # plus the endpoint's outstanding tokens per instance; KV_BLOCK_TOKENS: the engines' block
    ROUTING = "routing"
    KV_OVERLAP_WEIGHT = "kv_overlap_weight"
    KV_EVENTS_INTERVAL_S = "kv_events_interval_s"
    KV_BLOCK_TOKENS = "kv_block_tokens"


READINESS_PATH = f"/v2/models/{ModelName.HEALTH}/ready"
"""Triton's HTTP path that answers 200 only while the deployment can serve: the ``health``
model is loaded by ``pdtrt serve``'s supervisor (:mod:`pdtrt.serve.supervisor`) while every
phase has a healthy endpoint, and unloaded while one has none. Kubernetes probes and
``pdtrt serve``'s own wait use it; ``/v2/health/ready`` only says that every loaded model
loaded."""


# The log-probabilities of the generated tokens: every engine model, the router and the
# ensemble return them to a request that sets return_log_probs (NVIDIA's names and shapes).
_LOG_PROB_OUTPUTS = (
    tensor_spec("cum_log_probs", F32, -1),
    tensor_spec("output_log_probs", F32, -1, -1),
)

# --- the engine model ---------------------------------------------------------------------------
_CORE_INPUTS = (
    tensor_spec("input_ids", I32, -1, ragged=True),
    scalar_spec("input_lengths", I32, opt=False),
    scalar_spec("request_output_len", I32, opt=False),
    scalar_spec("end_id", I32),
    scalar_spec("pad_id", I32),
    tensor_spec("stop_words_list", I32, 2, -1, opt=True, ragged=True),
    tensor_spec("bad_words_list", I32, 2, -1, opt=True, ragged=True),
    scalar_spec("beam_width", I32),
    scalar_spec("temperature", F32),
    scalar_spec("runtime_top_k", I32),
    scalar_spec("runtime_top_p", F32),
    scalar_spec("len_penalty", F32),
    scalar_spec("repetition_penalty", F32),
    scalar_spec("min_length", I32),
    scalar_spec("presence_penalty", F32),
    scalar_spec("frequency_penalty", F32),
    scalar_spec("random_seed", U64),
    scalar_spec("return_log_probs", B),
    scalar_spec("exclude_input_in_output", B),
    scalar_spec("stop", B),
    scalar_spec("streaming", B),
    tensor_spec("context_phase_params", U8, -1, opt=True, ragged=True),
)
_TIMING_OUTPUTS = (
    tensor_spec("arrival_time_ns", I64, 1),
    tensor_spec("first_scheduled_time_ns", I64, 1),
    tensor_spec("first_token_time_ns", I64, 1),
    tensor_spec("last_token_time_ns", I64, 1),
)
_CORE_OUTPUTS = (
    tensor_spec("output_ids", I32, -1, -1),
    tensor_spec("sequence_length", I32, -1),
    tensor_spec("context_phase_params", U8, -1),
    *_TIMING_OUTPUTS,
    *_LOG_PROB_OUTPUTS,
)

CORE_ENGINE_IO = ModelIO(inputs=_CORE_INPUTS, outputs=_CORE_OUTPUTS)
"""The contract every engine model implements."""

INPUT_ALIASES = {"min_tokens": "min_length", "seed": "random_seed"}
"""NVIDIA's current name of a core input -> pdtrt's (older) one. TensorRT-LLM's ensemble
(``triton_backend/all_models/inflight_batcher_llm/ensemble/config.pbtxt`` at NVIDIA/TensorRT-LLM
2a9abd9536aa62ad3e4b9314be9286b1b1be523b) names them ``min_tokens`` and ``seed``, so a client
written for it would get "unexpected input" from an ensemble that knew only the older names.
pdtrt's ensemble, router and engine models declare both; a request gives either, never both
(:mod:`pdtrt.runtime.request_parsing` refuses that), and the router hands its phases the core
name only."""

_ALIAS_INPUTS = (scalar_spec("min_tokens", I32), scalar_spec("seed", U64))

TOKEN_COUNT_TENSORS = {"return_num_input_tokens": "num_input_tokens",
                       "return_num_output_tokens": "num_output_tokens"}
"""NVIDIA's token counts, asked for -> returned: the prompt's tokens and each response's, one
INT32 ``[1]`` each, only to a request that asks (TensorRT-LLM ``triton_backend/all_models/
inflight_batcher_llm/ensemble/config.pbtxt`` and ``tensorrt_llm/1/model.py``
``convert_response``, at NVIDIA/TensorRT-LLM 2a9abd9536aa). pdtrt's engine models and router
count them; TensorRT-LLM 0.21's C++ model is not known to, so its ensembles go without."""
_COUNT_INPUTS = tuple(scalar_spec(name, B) for name in TOKEN_COUNT_TENSORS)
_COUNT_OUTPUTS = tuple(tensor_spec(name, I32, 1) for name in TOKEN_COUNT_TENSORS.values())

ERROR_OUTPUT = "pdtrt_error"
"""pdtrt's engine models also have this output: the error message of a request that fails
after it has streamed tokens. Triton 2.51's BLS silently drops an error response a decoupled
model sends after data (measured; docs/design/serve.md), so the router would never learn of the
failure; the message therefore also travels in-band, before the error response itself."""

KV_EVENTS_OUTPUT = "kv_events"
"""pdtrt's engine models answer a request with the ``kv_events_cursor`` input with the KV
blocks they hold, as JSON in this output (:mod:`pdtrt.runtime.engine.kv_events`): what a
router's KV index is fed from."""

KV_CAPACITY_CURSOR = "capacity"
"""The ``kv_events_cursor`` that asks for the engine's KV capacity instead of its blocks: the
answer (JSON in :data:`KV_EVENTS_OUTPUT`) is ``{"max_blocks", "used_blocks",
"tokens_per_block"}`` from the LLM API's latest ``kvCacheStats`` (``{}`` before it has any),
with or without block reuse -- what ``kv_capacity`` routing reads
(:mod:`pdtrt.runtime.router.kv_capacity`)."""

PROBE_ID_PREFIX = "pdtrt-probe-"
"""The request id of a health probe starts with this (:func:`pdtrt.client.streams.probe`)."""

DRAIN_PARAMETER = "pdtrt_drain"
"""Request parameter that makes a request to a pdtrt engine model a drain request
(:class:`DrainAction`; the inputs of a health probe besides, as Triton requires them): the
model answers with its drain state as JSON in :data:`DRAIN_OUTPUT` (:mod:`pdtrt.runtime.engine.
drain`, docs/drain.md)."""

DRAIN_OUTPUT = "drain_state"
"""What a pdtrt engine model answers a drain request with: ``{"draining", "num_in_flight",
"num_held", "drained"}`` as JSON."""

DRAINING = "the endpoint is draining"
"""The start of the error a draining engine model answers health probes and new requests with:
a router takes the endpoint out of its pools as *draining* (not a failure), and ``pdtrt serve``'s
supervisor counts it as an answer, not as silence."""


class DrainAction(StrEnum):
    """What a drain request asks (the value of :data:`DRAIN_PARAMETER`)."""

    DRAIN = "drain"  # take no new requests, finish those in flight
    RESUME = "resume"  # take new requests again
    STATUS = "status"  # only say how far the drain is


KV_EVENT_BUFFER = 4096
"""KV cache events an engine keeps between two drains (``event_buffer_max_size``, which
LlmArgs defaults to 0: none) when block reuse is on; the engine model drains every 50 ms."""

_TOP_LOG_PROB_INPUTS = (scalar_spec(TOP_LOG_PROBS_INPUT, I32),)
_TOP_LOG_PROB_OUTPUTS = (tensor_spec(TOP_LOG_PROBS_OUTPUT, F32, -1, -1, -1),
                         tensor_spec(TOP_LOG_PROB_IDS_OUTPUT, I32, -1, -1, -1))

REFERENCE_ENGINE_IO = ModelIO(
    inputs=_CORE_INPUTS + _ALIAS_INPUTS + _COUNT_INPUTS + _TOP_LOG_PROB_INPUTS
    + (scalar_spec("kv_events_cursor", STR),),
    outputs=_CORE_OUTPUTS + _COUNT_OUTPUTS + _TOP_LOG_PROB_OUTPUTS
    + (tensor_spec(ERROR_OUTPUT, STR, 1),
                                              tensor_spec(KV_EVENTS_OUTPUT, STR, 1),
                                              tensor_spec(DRAIN_OUTPUT, STR, 1)))
"""pdtrt's LLM-API engine model: the core contract plus :data:`ERROR_OUTPUT` and the KV-events
request (``kv_events_cursor`` in, :data:`KV_EVENTS_OUTPUT` out), the drain request's answer
(:data:`DRAIN_OUTPUT`), the :data:`INPUT_ALIASES`,
the :data:`TOKEN_COUNT_TENSORS` and the top log-probabilities (:data:`TOP_LOG_PROBS_INPUT`)."""

ROUTER_IO = ModelIO(inputs=CORE_ENGINE_IO.inputs + _ALIAS_INPUTS + _COUNT_INPUTS
                    + _TOP_LOG_PROB_INPUTS + (scalar_spec(TIMING_INPUT, B),),
                    outputs=CORE_ENGINE_IO.outputs + _COUNT_OUTPUTS + _TOP_LOG_PROB_OUTPUTS
                    + (tensor_spec(TIMING_OUTPUT, STR, 1),)).without("context_phase_params")
"""pdtrt's router: the engine model's core I/O minus the phase hand-off it performs itself,
plus the :data:`INPUT_ALIASES`, the :data:`TOKEN_COUNT_TENSORS`, the top log-probabilities
(:data:`TOP_LOG_PROBS_INPUT`, relayed from the phases) and the request's timing
(:data:`TIMING_INPUT` -> :data:`TIMING_OUTPUT`)."""


# --- the request that crosses the boundary ------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RequestSampling:
    """What a request asks of the sampler; TensorRT-LLM's semantics: top_k 0 and top_p 0 (the
    defaults) mean greedy. Penalties, ``min_tokens``, the word lists and log-probs act on
    greedy and sampled requests alike. The OpenAI front builds it from a body
    (``pdtrt.front.protocol``), :meth:`inputs` sends it, the engine models read it back."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.0
    seed: int | None = None  # random_seed (or seed); None: not given (the runtime's default, 0)
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0  # min_length (or min_tokens): the end id is banned before that many
    stop_words: tuple[tuple[int, ...], ...] = ()
    bad_words: tuple[tuple[int, ...], ...] = ()
    return_log_probs: bool = False
    num_top_log_probs: int = 0  # alternatives per token (TOP_LOG_PROBS_INPUT); needs log-probs

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1 or (self.top_k == 0 and self.top_p == 0)

    def inputs(self) -> dict[str, Any]:
        """The scalar core inputs (``[1, 1]`` arrays of their config dtypes) of the values that
        differ from the defaults -- temperature, top_k and top_p always; the word lists are
        the caller's (they need the tokenizer's ids laid out as TensorRT-LLM's ``[1, 2, n]``)."""
        import numpy as np

        default = RequestSampling()
        values = {name: getattr(self, field) for field, name in _SAMPLING_INPUTS.items()
                  if field in _ALWAYS_SENT or getattr(self, field) != getattr(default, field)}
        return {name: np.array([[value]], dtype=_CORE_SCALARS[name].dtype.numpy_name)
                for name, value in values.items() if value is not None}


# RequestSampling's fields -> the core input that carries each
_SAMPLING_INPUTS = {"temperature": "temperature", "top_k": "runtime_top_k",
                    "top_p": "runtime_top_p", "seed": "random_seed",
                    "repetition_penalty": "repetition_penalty",
                    "presence_penalty": "presence_penalty",
                    "frequency_penalty": "frequency_penalty", "min_tokens": "min_length",
                    "return_log_probs": "return_log_probs",
                    "num_top_log_probs": TOP_LOG_PROBS_INPUT}
_ALWAYS_SENT = ("temperature", "top_k", "top_p")
_CORE_SCALARS = {t.name: t for t in _CORE_INPUTS + _TOP_LOG_PROB_INPUTS}
