"""The models around the engine model and the wiring between them, per target.

NVIDIA's text-level tables (the ensemble, the preprocessing and postprocessing models; names,
dtypes and dims from TensorRT-LLM's ``triton_backend/all_models/inflight_batcher_llm/
{ensemble,preprocessing,postprocessing,tensorrt_llm}/config.pbtxt``), the engine model's I/O on
each target (pdtrt's own engine model implements :data:`~pdtrt.engine_io.CORE_ENGINE_IO`;
TensorRT-LLM 0.21's ``tensorrt_llm`` model has more, and two core inputs under other names:
:data:`TRTLLM_0_21_INPUT_NAMES`), and the ensemble's ``input_map``/``output_map`` per step.
The contract of the engine model itself, and the request that crosses it, are
:mod:`pdtrt.engine_io`'s. This module is data: it renders nothing and reads no files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdtrt.engine_io import (
    CORE_ENGINE_IO,
    INPUT_ALIASES,
    REFERENCE_ENGINE_IO,
    TIMING_INPUT,
    TIMING_OUTPUT,
    TOKEN_COUNT_TENSORS,
    ModelIO,
    TritonDType,
    scalar_spec,
    tensor_spec,
)
from pdtrt.enums import Target

__all__ = ["ENGINE_STEP_MAP", "ENSEMBLE_IO", "GPT_MODEL_PATH", "PASSED_OUTPUTS",
           "POSTPROCESSING_IO", "POSTPROCESSING_STEP_MAP", "PREPROCESSING_IO",
           "PREPROCESSING_STEP_MAP", "TRTLLM_0_21_ENGINE_IO", "TRTLLM_0_21_INPUT_NAMES",
           "StepMap", "engine_input_name", "engine_input_renames", "engine_io",
           "engine_step_map", "ensemble_io", "passed_input", "passed_output",
           "postprocessing_step_map"]

_t, _s = tensor_spec, scalar_spec
B, U8, I32, I64, U64 = (TritonDType.BOOL, TritonDType.UINT8, TritonDType.INT32,
                        TritonDType.INT64, TritonDType.UINT64)
F16, F32, STR = TritonDType.FP16, TritonDType.FP32, TritonDType.STRING
_CORE_INPUTS, _CORE_OUTPUTS = CORE_ENGINE_IO.inputs, CORE_ENGINE_IO.outputs
_LOG_PROB_OUTPUTS = (CORE_ENGINE_IO.output("cum_log_probs"),
                     CORE_ENGINE_IO.output("output_log_probs"))

# --- NVIDIA's ensemble (text in, text out): the subset pdtrt serves ---------------------------
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
        _t("return_num_input_tokens", B, 1, opt=True),  # TOKEN_COUNT_TENSORS
        _t("return_num_output_tokens", B, 1, opt=True),
        _t("beam_width", I32, 1, opt=True),
        _t("stream", B, 1, opt=True),
        _t(TIMING_INPUT, B, 1, opt=True),  # pdtrt's own: the router's timing, when asked
    ),
    outputs=(_t("text_output", STR, -1), *_LOG_PROB_OUTPUTS, _t("num_input_tokens", I32, 1),
             _t("num_output_tokens", I32, 1), _t(TIMING_OUTPUT, STR, 1)),
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

PASSED_OUTPUTS = tuple(t for t in ENSEMBLE_IO.outputs if t.name != "text_output")
"""The ensemble's outputs besides the text: the middle step's log-probabilities, token counts
and timing, which postprocessing carries past the text -- each present on *every* response,
zeros (an empty timing) where the middle step did not send it (it sends them only when asked).
Clients that read every declared output of every response need that: perf_analyzer (and so
genai-perf) exports a value per declared output and reads memory it does not own for one a
response lacks (measured with tritonclient 2.51's, docs/bench.md). NVIDIA's postprocessing did
the same for its log-probabilities and logits up to v0.13 (``CUM_LOG_PROBS`` ->
``OUT_CUM_LOG_PROBS``, ``np.array([[0.0]])`` when absent:
triton-inference-server/tensorrtllm_backend f80395e,
``all_models/inflight_batcher_llm/postprocessing/1/model.py``); postprocessing's names here
follow that pattern."""


def passed_input(output: str) -> str:
    """Postprocessing's input for the ensemble output ``output`` (:data:`PASSED_OUTPUTS`)."""
    return output.upper()


def passed_output(output: str) -> str:
    """Postprocessing's output for the ensemble output ``output`` (:data:`PASSED_OUTPUTS`)."""
    return f"OUT_{output.upper()}"


POSTPROCESSING_IO = ModelIO(
    inputs=(_t("TOKENS_BATCH", I32, -1, -1), _t("SEQUENCE_LENGTH", I32, -1),
            *(replace(t, name=passed_input(t.name), optional=True) for t in PASSED_OUTPUTS)),
    outputs=(_t("OUTPUT", STR, -1),
             *(replace(t, name=passed_output(t.name)) for t in PASSED_OUTPUTS)),
)

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
            ("min_tokens", "min_tokens"), ("seed", "seed"),
            *((name, name) for name in TOKEN_COUNT_TENSORS), (TIMING_INPUT, TIMING_INPUT)),
    outputs=(("output_ids", "_TOKENS_BATCH"), ("sequence_length", "_SEQUENCE_LENGTH"),
             *((t.name, f"_{passed_input(t.name)}") for t in PASSED_OUTPUTS)),
)
"""The middle step: the router (disaggregated) or the aggregated engine model. Its outputs
besides the tokens go to postprocessing, which sends each on every response
(:data:`PASSED_OUTPUTS`); the router's timing (:data:`~pdtrt.engine_io.TIMING_OUTPUT`) too, on
the final response (the router sends that one with empty tokens when every token went out
before it: postprocessing needs its tokens on every response)."""


def _has_aliases(target: Target) -> bool:
    """Whether ``target``'s engine model takes both names of each aliased input: pdtrt's own
    do; NVIDIA's ``tensorrt_llm`` of 0.21 has only the new ones, which the core names map to."""
    return not _ENGINE_INPUT_NAMES[target]


# what a middle step passes on only where its model declares it: the token counts (not
# TensorRT-LLM 0.21's model) and the timing (the router only)
_OPTIONAL_INPUTS = {*TOKEN_COUNT_TENSORS, TIMING_INPUT}
_OPTIONAL_OUTPUTS = {*TOKEN_COUNT_TENSORS.values(), TIMING_OUTPUT}


def engine_step_map(target: Target) -> StepMap:
    """:data:`ENGINE_STEP_MAP` with the model-side names of ``target``'s engine model (the
    aggregated ensemble's middle step). On TensorRT-LLM 0.21 the ensemble's ``min_length`` /
    ``random_seed`` feed the model's ``min_tokens`` / ``seed``, so the ensemble's own
    ``min_tokens`` / ``seed`` have nowhere to go and are left out (:func:`ensemble_io`), and so
    are the token counts its model does not declare. No engine model answers the router's
    timing, so no aggregated ensemble offers it."""
    io = engine_io(target)
    inputs = ENGINE_STEP_MAP.inputs if _has_aliases(target) else tuple(
        (name, tensor) for name, tensor in ENGINE_STEP_MAP.inputs if name not in INPUT_ALIASES)
    inputs = tuple((name, tensor) for name, tensor in inputs
                   if name not in _OPTIONAL_INPUTS or name in io.input_names)
    outputs = tuple((name, tensor) for name, tensor in ENGINE_STEP_MAP.outputs
                    if name not in _OPTIONAL_OUTPUTS or name in io.output_names)
    return StepMap(inputs=tuple((engine_input_name(target, name), tensor)
                                for name, tensor in inputs), outputs=outputs)


def ensemble_io(middle: StepMap) -> ModelIO:
    """:data:`ENSEMBLE_IO` less the optional inputs that the ``middle`` step does not take
    and the optional outputs it does not give (the aggregated ensembles: no timing; on
    TensorRT-LLM 0.21 also no ``min_tokens`` / ``seed``, no counts)."""
    fed = {tensor for _, tensor in middle.inputs}
    given = {name for name, _ in middle.outputs}
    return ENSEMBLE_IO.without(
        *(name for name in (*INPUT_ALIASES, *_OPTIONAL_INPUTS) if name not in fed),
        *(name for name in _OPTIONAL_OUTPUTS if name not in given))


def postprocessing_step_map(middle: StepMap) -> StepMap:
    """Postprocessing's step after ``middle``: the tokens to text, and each of
    :data:`PASSED_OUTPUTS` that ``middle`` gives carried on to the ensemble's output."""
    gives = {name for name, _ in middle.outputs}
    given = [t.name for t in PASSED_OUTPUTS if t.name in gives]
    return StepMap(
        inputs=(("TOKENS_BATCH", "_TOKENS_BATCH"), ("SEQUENCE_LENGTH", "_SEQUENCE_LENGTH"),
                *((passed_input(name), f"_{passed_input(name)}") for name in given)),
        outputs=(("OUTPUT", "text_output"), *((passed_output(name), name) for name in given)))


POSTPROCESSING_STEP_MAP = postprocessing_step_map(ENGINE_STEP_MAP)
"""Postprocessing's step in the disaggregated ensemble (after the router)."""
