"""The I/O contracts of the models in a pdtrt repository, as small typed tables.

One table per model kind: NVIDIA's ensemble (text in, text out), the preprocessing and
postprocessing models, the engine model (``tensorrt_llm`` of TensorRT-LLM 0.21 and pdtrt's
reference engine model, which implements the *core* subset), and pdtrt's router (the core
contract minus ``context_phase_params``, so the ensemble wiring is the same whichever model sits
in the middle). Plus the wiring itself (the ensemble's ``input_map``/``output_map`` per step),
the request parameter that selects the phase, and the ``pdtrt_role`` / parameter names the
Python models read from their ``config.pbtxt``.

The names, dtypes and dims of NVIDIA's tables come from TensorRT-LLM's
``triton_backend/all_models/inflight_batcher_llm/{ensemble,preprocessing,postprocessing,
tensorrt_llm}/config.pbtxt``. Two core inputs have other names in TensorRT-LLM 0.21's model
(:data:`TRTLLM_0_21_INPUT_NAMES`: ``min_tokens``/``seed``); pdtrt's core keeps
``min_length``/``random_seed`` and :func:`engine_step_map` maps them. NVIDIA's ensemble now
names them ``min_tokens``/``seed`` too, so pdtrt's ensemble, router and engine models accept
either name of each (:data:`INPUT_ALIASES`; one request giving both is refused).
Dims exclude the batch dimension (every model has ``max_batch_size > 0``). This module is data:
it renders nothing and reads no files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from pdtrt.enums import Phase, Target

__all__ = [
    "AGGREGATED_ENSEMBLE_NAME",
    "CORE_ENGINE_IO",
    "ERROR_OUTPUT",
    "KV_EVENTS_OUTPUT",
    "KV_EVENT_BUFFER",
    "KV_TRANSFER_DEADLINE_MARGIN_S",
    "ENSEMBLE_IO",
    "ENSEMBLE_NAME",
    "ENGINE_STEP_MAP",
    "INPUT_ALIASES",
    "PHASE_ROLES",
    "POSTPROCESSING_IO",
    "POSTPROCESSING_STEP_MAP",
    "PREPROCESSING_IO",
    "PREPROCESSING_STEP_MAP",
    "READINESS_PATH",
    "REQUEST_TYPE_PARAMETER",
    "REFERENCE_ENGINE_IO",
    "ROUTER_IO",
    "TRTLLM_0_21_ENGINE_IO",
    "TRTLLM_0_21_INPUT_NAMES",
    "ModelIO",
    "ModelName",
    "Param",
    "RequestType",
    "Role",
    "StepMap",
    "TensorSpec",
    "TritonDType",
    "engine_input_name",
    "engine_io",
    "engine_step_map",
    "ensemble_io",
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


def _t(name: str, dtype: TritonDType, *dims: int, opt: bool = False, ragged: bool = False,
       scalar: bool = False) -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, dims=dims, optional=opt, ragged=ragged,
                      reshape_scalar=scalar)


def _s(name: str, dtype: TritonDType, *, opt: bool = True) -> TensorSpec:
    """An engine-model scalar: ``dims: [1]`` reshaped to ``[]`` (the batch dim stays)."""
    return _t(name, dtype, 1, opt=opt, scalar=True)


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


# --- NVIDIA's ensemble (text in, text out): the subset pdtrt serves ---------------------------
# The log-probabilities of the generated tokens: every engine model, the router and the
# ensemble return them to a request that sets return_log_probs (NVIDIA's names and shapes).
_LOG_PROB_OUTPUTS = (
    _t("cum_log_probs", F32, -1),
    _t("output_log_probs", F32, -1, -1),
)

ENSEMBLE_IO = ModelIO(
    inputs=(
        _t("text_input", STR, 1),
        _t("max_tokens", I32, 1),
        _t("bad_words", STR, -1, opt=True),
        _t("stop_words", STR, -1, opt=True),
        _t("exclude_input_in_output", B, 1, opt=True),
        _t("end_id", I32, 1, opt=True),
        _t("pad_id", I32, 1, opt=True),
        _t("top_k", I32, 1, opt=True),
        _t("top_p", F32, 1, opt=True),
        _t("temperature", F32, 1, opt=True),
        _t("length_penalty", F32, 1, opt=True),
        _t("repetition_penalty", F32, 1, opt=True),
        _t("min_length", I32, 1, opt=True),
        _t("presence_penalty", F32, 1, opt=True),
        _t("frequency_penalty", F32, 1, opt=True),
        _t("random_seed", U64, 1, opt=True),
        _t("min_tokens", I32, 1, opt=True),  # NVIDIA's current names (INPUT_ALIASES)
        _t("seed", U64, 1, opt=True),
        _t("return_log_probs", B, 1, opt=True),
        _t("beam_width", I32, 1, opt=True),
        _t("stream", B, 1, opt=True),
    ),
    outputs=(_t("text_output", STR, -1), *_LOG_PROB_OUTPUTS),
)

# --- preprocessing / postprocessing (NVIDIA's names; a subset) --------------------------------
PREPROCESSING_IO = ModelIO(
    inputs=(
        _t("QUERY", STR, 1),
        _t("REQUEST_OUTPUT_LEN", I32, 1),
        _t("BAD_WORDS_DICT", STR, -1, opt=True),
        _t("STOP_WORDS_DICT", STR, -1, opt=True),
        _t("END_ID", I32, 1, opt=True),
        _t("PAD_ID", I32, 1, opt=True),
    ),
    outputs=(
        _t("INPUT_ID", I32, -1),
        _t("REQUEST_INPUT_LEN", I32, 1),
        _t("BAD_WORDS_IDS", I32, 2, -1),
        _t("STOP_WORDS_IDS", I32, 2, -1),
        _t("REQUEST_OUTPUT_LEN", I32, -1),
        _t("OUT_END_ID", I32, 1),
        _t("OUT_PAD_ID", I32, 1),
    ),
)

POSTPROCESSING_IO = ModelIO(
    inputs=(_t("TOKENS_BATCH", I32, -1, -1), _t("SEQUENCE_LENGTH", I32, -1)),
    outputs=(_t("OUTPUT", STR, -1),),
)

# --- the engine model ---------------------------------------------------------------------------
_CORE_INPUTS = (
    _t("input_ids", I32, -1, ragged=True),
    _s("input_lengths", I32, opt=False),
    _s("request_output_len", I32, opt=False),
    _s("end_id", I32),
    _s("pad_id", I32),
    _t("stop_words_list", I32, 2, -1, opt=True, ragged=True),
    _t("bad_words_list", I32, 2, -1, opt=True, ragged=True),
    _s("beam_width", I32),
    _s("temperature", F32),
    _s("runtime_top_k", I32),
    _s("runtime_top_p", F32),
    _s("len_penalty", F32),
    _s("repetition_penalty", F32),
    _s("min_length", I32),
    _s("presence_penalty", F32),
    _s("frequency_penalty", F32),
    _s("random_seed", U64),
    _s("return_log_probs", B),
    _s("exclude_input_in_output", B),
    _s("stop", B),
    _s("streaming", B),
    _t("context_phase_params", U8, -1, opt=True, ragged=True),
)
_TIMING_OUTPUTS = (
    _t("arrival_time_ns", I64, 1),
    _t("first_scheduled_time_ns", I64, 1),
    _t("first_token_time_ns", I64, 1),
    _t("last_token_time_ns", I64, 1),
)
_CORE_OUTPUTS = (
    _t("output_ids", I32, -1, -1),
    _t("sequence_length", I32, -1),
    _t("context_phase_params", U8, -1),
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

_ALIAS_INPUTS = (_s("min_tokens", I32), _s("seed", U64))

ERROR_OUTPUT = "pdtrt_error"
"""pdtrt's engine models also have this output: the error message of a request that fails
after it has streamed tokens. Triton 2.51's BLS silently drops an error response a decoupled
model sends after data (measured; docs/serve.md), so the router would never learn of the
failure; the message therefore also travels in-band, before the error response itself."""

KV_EVENTS_OUTPUT = "kv_events"
"""pdtrt's engine models answer a request with the ``kv_events_cursor`` input with the KV
blocks they hold, as JSON in this output (:mod:`pdtrt.runtime.engine.kv_events`): what a
router's KV index is fed from."""

KV_EVENT_BUFFER = 4096
"""KV cache events an engine keeps between two drains (``event_buffer_max_size``, which
LlmArgs defaults to 0: none) when block reuse is on; the engine model drains every 50 ms."""

REFERENCE_ENGINE_IO = ModelIO(
    inputs=_CORE_INPUTS + _ALIAS_INPUTS + (_s("kv_events_cursor", STR),),
    outputs=_CORE_OUTPUTS + (_t(ERROR_OUTPUT, STR, 1), _t(KV_EVENTS_OUTPUT, STR, 1)))
"""pdtrt's LLM-API engine model: the core contract plus :data:`ERROR_OUTPUT` and the KV-events
request (``kv_events_cursor`` in, :data:`KV_EVENTS_OUTPUT` out), and the
:data:`INPUT_ALIASES`."""

ROUTER_IO = ModelIO(inputs=CORE_ENGINE_IO.inputs + _ALIAS_INPUTS,
                    outputs=CORE_ENGINE_IO.outputs).without("context_phase_params")
"""pdtrt's router: the engine model's core I/O minus the phase hand-off it performs itself,
plus the :data:`INPUT_ALIASES`."""

_V021_EXTRA_INPUTS = (
    _t("encoder_input_features", F16, -1, -1, opt=True, ragged=True),
    _s("encoder_output_lengths", I32),
    _s("num_return_sequences", I32),
    _t("draft_input_ids", I32, -1, opt=True, ragged=True),
    _t("decoder_input_ids", I32, -1, opt=True, ragged=True),
    _s("decoder_input_lengths", I32),
    _t("draft_logits", F32, -1, -1, opt=True, ragged=True),
    _s("draft_acceptance_threshold", F32),
    _t("embedding_bias", F32, -1, opt=True, ragged=True),
    _s("runtime_top_p_min", F32),
    _s("runtime_top_p_decay", F32),
    _s("runtime_top_p_reset_ids", I32),
    _s("early_stopping", B),
    _s("beam_search_diversity_rate", F32),
    _s("return_context_logits", B),
    _s("return_generation_logits", B),
    _s("return_perf_metrics", B),
    _t("prompt_embedding_table", F16, -1, -1, opt=True, ragged=True),
    _t("prompt_table_extra_ids", U64, -1, opt=True, ragged=True),
    _s("prompt_vocab_size", I32),
    _s("lora_task_id", U64),
    _t("lora_weights", F16, -1, -1, opt=True, ragged=True),
    _t("lora_config", I32, -1, 3, opt=True, ragged=True),
    _t("retention_token_range_starts", I32, -1, opt=True, ragged=True),
    _t("retention_token_range_ends", I32, -1, opt=True, ragged=True),
    _t("retention_token_range_priorities", I32, -1, opt=True, ragged=True),
    _t("retention_token_range_durations_ms", I32, -1, opt=True, ragged=True),
    _t("retention_decode_priority", I32, 1, opt=True, ragged=True),
    _t("retention_decode_duration_ms", I32, 1, opt=True, ragged=True),
    _t("guided_decoding_guide_type", STR, 1, opt=True, ragged=True),
    _t("guided_decoding_guide", STR, 1, opt=True, ragged=True),
    _t("lookahead_window_size", I32, 1, opt=True, ragged=True),
    _t("lookahead_ngram_size", I32, 1, opt=True, ragged=True),
    _t("lookahead_verification_set_size", I32, 1, opt=True, ragged=True),
)
_V021_EXTRA_OUTPUTS = (
    _t("context_logits", F32, -1, -1),
    _t("generation_logits", F32, -1, -1, -1),
    _t("batch_index", I32, 1),
    _t("sequence_index", I32, 1),
    _t("kv_cache_alloc_new_blocks", I32, 1),
    _t("kv_cache_reused_blocks", I32, 1),
    _t("kv_cache_alloc_total_blocks", I32, 1),
    _t("acceptance_rate", F32, 1),
    _t("total_accepted_draft_tokens", I32, 1),
    _t("total_draft_tokens", I32, 1),
)

GPT_MODEL_PATH = "gpt_model_path"
"""The engine-directory parameter of NVIDIA's ``tensorrt_llm`` (C++ backend) model config."""

TRTLLM_0_21_INPUT_NAMES = {"min_length": "min_tokens", "random_seed": "seed"}
"""Core inputs named differently by TensorRT-LLM 0.21's ``tensorrt_llm`` model: renamed on the
backend's main line on 2025-05-13 (triton-inference-server/tensorrtllm_backend c2e65b8,
``inflight_batcher_llm/src/utils.h:93,97`` and ``all_models/.../tensorrt_llm/config.pbtxt``),
before TensorRT-LLM 0.20/0.21 branched. A config declaring the old names still loads, and the
backend never reads them: the values would be silently ignored."""

TRTLLM_0_21_ENGINE_IO = ModelIO(inputs=tuple(replace(t, name=TRTLLM_0_21_INPUT_NAMES.get(
                                    t.name, t.name)) for t in _CORE_INPUTS) + _V021_EXTRA_INPUTS,
                                outputs=_CORE_OUTPUTS + _V021_EXTRA_OUTPUTS)
"""``tensorrt_llm`` of TensorRT-LLM 0.21 (logits as FP32, prompt tables and LoRA as FP16:
NVIDIA's usual fill values for ``${logits_datatype}`` and friends)."""

# trtllm-1.2 runs pdtrt's own (LLM-API) engine model: the reference engine model's I/O
_ENGINE_IO = {Target.REFERENCE: REFERENCE_ENGINE_IO,
              Target.TRTLLM_0_21: TRTLLM_0_21_ENGINE_IO,
              Target.TRTLLM_1_2: REFERENCE_ENGINE_IO}


_ENGINE_INPUT_NAMES: dict[Target, dict[str, str]] = {Target.REFERENCE: {},
                                                    Target.TRTLLM_0_21: TRTLLM_0_21_INPUT_NAMES,
                                                    Target.TRTLLM_1_2: {}}


def engine_input_name(target: Target, name: str) -> str:
    """What the engine model of ``target`` calls the core input ``name``."""
    return _ENGINE_INPUT_NAMES[target].get(name, name)


def engine_input_renames(target: Target) -> dict[str, str]:
    """The core inputs ``target``'s engine model names differently: core name -> its name."""
    return dict(_ENGINE_INPUT_NAMES[target])


def engine_io(target: Target) -> ModelIO:
    """The engine model's I/O on ``target``; always a superset of :data:`CORE_ENGINE_IO`."""
    return _ENGINE_IO[target]


# --- ensemble wiring: (model tensor, ensemble tensor) pairs per step -------------------------
@dataclass(frozen=True, kw_only=True)
class StepMap:
    """One ensemble step's ``input_map``/``output_map``: (model's name, ensemble tensor)."""

    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]


PREPROCESSING_STEP_MAP = StepMap(
    inputs=(("QUERY", "text_input"), ("REQUEST_OUTPUT_LEN", "max_tokens"),
            ("BAD_WORDS_DICT", "bad_words"), ("STOP_WORDS_DICT", "stop_words"),
            ("END_ID", "end_id"), ("PAD_ID", "pad_id")),
    outputs=(("INPUT_ID", "_INPUT_ID"), ("REQUEST_INPUT_LEN", "_REQUEST_INPUT_LEN"),
             ("BAD_WORDS_IDS", "_BAD_WORDS_IDS"), ("STOP_WORDS_IDS", "_STOP_WORDS_IDS"),
             ("REQUEST_OUTPUT_LEN", "_REQUEST_OUTPUT_LEN"),
             ("OUT_END_ID", "_PREPROCESSOR_END_ID"), ("OUT_PAD_ID", "_PREPROCESSOR_PAD_ID")),
)

ENGINE_STEP_MAP = StepMap(
    inputs=(("input_ids", "_INPUT_ID"), ("input_lengths", "_REQUEST_INPUT_LEN"),
            ("request_output_len", "_REQUEST_OUTPUT_LEN"), ("end_id", "_PREPROCESSOR_END_ID"),
            ("pad_id", "_PREPROCESSOR_PAD_ID"), ("stop_words_list", "_STOP_WORDS_IDS"),
            ("bad_words_list", "_BAD_WORDS_IDS"), ("beam_width", "beam_width"),
            ("temperature", "temperature"), ("runtime_top_k", "top_k"),
            ("runtime_top_p", "top_p"), ("len_penalty", "length_penalty"),
            ("repetition_penalty", "repetition_penalty"), ("min_length", "min_length"),
            ("presence_penalty", "presence_penalty"), ("frequency_penalty", "frequency_penalty"),
            ("random_seed", "random_seed"), ("return_log_probs", "return_log_probs"),
            ("exclude_input_in_output", "exclude_input_in_output"), ("streaming", "stream"),
            ("min_tokens", "min_tokens"), ("seed", "seed")),
    outputs=(("output_ids", "_TOKENS_BATCH"), ("sequence_length", "_SEQUENCE_LENGTH"),
             ("cum_log_probs", "cum_log_probs"), ("output_log_probs", "output_log_probs")),
)
"""The middle step: the router (disaggregated) or the aggregated engine model."""


def _has_aliases(target: Target) -> bool:
    """Whether ``target``'s engine model takes both names of each aliased input: pdtrt's own
    do; NVIDIA's ``tensorrt_llm`` of 0.21 has only the new ones, which the core names map to."""
    return not _ENGINE_INPUT_NAMES[target]


def engine_step_map(target: Target) -> StepMap:
    """:data:`ENGINE_STEP_MAP` with the model-side names of ``target``'s engine model (the
    aggregated ensemble's middle step). On TensorRT-LLM 0.21 the ensemble's ``min_length`` /
    ``random_seed`` feed the model's ``min_tokens`` / ``seed``, so the ensemble's own
    ``min_tokens`` / ``seed`` have nowhere to go and are left out (:func:`ensemble_io`)."""
    inputs = ENGINE_STEP_MAP.inputs if _has_aliases(target) else tuple(
        (name, tensor) for name, tensor in ENGINE_STEP_MAP.inputs if name not in INPUT_ALIASES)
    return StepMap(inputs=tuple((engine_input_name(target, name), tensor)
                                for name, tensor in inputs),
                   outputs=ENGINE_STEP_MAP.outputs)


def ensemble_io(middle: StepMap) -> ModelIO:
    """:data:`ENSEMBLE_IO` less the optional inputs that the ``middle`` step does not take
    (the aggregated ensemble on TensorRT-LLM 0.21: no ``min_tokens`` / ``seed``)."""
    fed = {tensor for _, tensor in middle.inputs}
    return ENSEMBLE_IO.without(*(name for name in INPUT_ALIASES if name not in fed))

POSTPROCESSING_STEP_MAP = StepMap(
    inputs=(("TOKENS_BATCH", "_TOKENS_BATCH"), ("SEQUENCE_LENGTH", "_SEQUENCE_LENGTH")),
    outputs=(("OUTPUT", "text_output"),),
)
