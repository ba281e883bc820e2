"""The I/O tables: NVIDIA's ensemble contract, the core engine subset, the ensemble wiring;
the model roles and the phases they serve."""

from __future__ import annotations

import pytest

from pdtrt.engine_io import (
    CORE_ENGINE_IO,
    INPUT_ALIASES,
    PHASE_ROLES,
    REFERENCE_ENGINE_IO,
    ROUTER_IO,
    TIMING_INPUT,
    TIMING_OUTPUT,
    TOKEN_COUNT_TENSORS,
    TOP_LOG_PROB_IDS_OUTPUT,
    TOP_LOG_PROBS_INPUT,
    TOP_LOG_PROBS_OUTPUT,
    RequestSampling,
    Role,
    TritonDType,
    top_log_prob_outputs,
    top_log_probs_of,
)
from pdtrt.ensemble import (
    ENGINE_STEP_MAP,
    ENSEMBLE_IO,
    POSTPROCESSING_IO,
    POSTPROCESSING_STEP_MAP,
    PREPROCESSING_IO,
    PREPROCESSING_STEP_MAP,
    TRTLLM_0_21_ENGINE_IO,
    engine_input_name,
    engine_io,
    engine_step_map,
    ensemble_io,
    postprocessing_step_map,
)
from pdtrt.enums import Phase, Target

# NVIDIA's inflight_batcher_llm ensemble of TensorRT-LLM 0.21 (shared/reference/triton-trtllm.md):
# what genai-perf (--backend tensorrtllm) and tritonclient examples send and read.
NVIDIA_ENSEMBLE = {
    "text_input": ("TYPE_STRING", (1,), False),
    "max_tokens": ("TYPE_INT32", (1,), False),
    "bad_words": ("TYPE_STRING", (-1,), True),
    "stop_words": ("TYPE_STRING", (-1,), True),
    "exclude_input_in_output": ("TYPE_BOOL", (1,), True),
    "end_id": ("TYPE_INT32", (1,), True),
    "pad_id": ("TYPE_INT32", (1,), True),
    "top_k": ("TYPE_INT32", (1,), True),
    "top_p": ("TYPE_FP32", (1,), True),
    "temperature": ("TYPE_FP32", (1,), True),
    "length_penalty": ("TYPE_FP32", (1,), True),
    "repetition_penalty": ("TYPE_FP32", (1,), True),
    "min_length": ("TYPE_INT32", (1,), True),
    "presence_penalty": ("TYPE_FP32", (1,), True),
    "frequency_penalty": ("TYPE_FP32", (1,), True),
    "random_seed": ("TYPE_UINT64", (1,), True),
    "return_log_probs": ("TYPE_BOOL", (1,), True),
    "beam_width": ("TYPE_INT32", (1,), True),
    "stream": ("TYPE_BOOL", (1,), True),
}
# NVIDIA's current ensemble names two of them otherwise (TensorRT-LLM's
# triton_backend/all_models/inflight_batcher_llm/ensemble/config.pbtxt at 2a9abd95):
# pdtrt's ensemble takes both names (INPUT_ALIASES)
NVIDIA_CURRENT_NAMES = {"min_tokens": ("TYPE_INT32", (1,), True),
                        "seed": ("TYPE_UINT64", (1,), True)}
# later additions of NVIDIA's ensemble (ensemble/config.pbtxt at NVIDIA/TensorRT-LLM@2a9abd95)
NVIDIA_TOKEN_COUNTS = {"return_num_input_tokens": ("TYPE_BOOL", (1,), True),
                       "return_num_output_tokens": ("TYPE_BOOL", (1,), True)}
# pdtrt's own, optional: the router's timing (docs/serve.md, "Per-request timing")
PDTRT_TIMING = {TIMING_INPUT: ("TYPE_BOOL", (1,), True)}


def test_ensemble_matches_nvidia_contract():
    got = {t.name: (str(t.dtype), t.dims, t.optional) for t in ENSEMBLE_IO.inputs}
    assert got == {**NVIDIA_ENSEMBLE, **NVIDIA_CURRENT_NAMES, **NVIDIA_TOKEN_COUNTS,
                   **PDTRT_TIMING}
    assert {INPUT_ALIASES[n] for n in NVIDIA_CURRENT_NAMES} == {"min_length", "random_seed"}
    # a subset of NVIDIA's ensemble outputs, with its names, types and dims
    assert [(t.name, str(t.dtype), t.dims) for t in ENSEMBLE_IO.outputs] == [
        ("text_output", "TYPE_STRING", (-1,)), ("cum_log_probs", "TYPE_FP32", (-1,)),
        ("output_log_probs", "TYPE_FP32", (-1, -1)), ("num_input_tokens", "TYPE_INT32", (1,)),
        ("num_output_tokens", "TYPE_INT32", (1,)), (TIMING_OUTPUT, "TYPE_STRING", (1,))]


@pytest.mark.parametrize("target", list(Target), ids=str)
def test_every_engine_table_contains_the_core(target):
    table = engine_io(target)
    for core in CORE_ENGINE_IO.inputs:
        t = table.input(engine_input_name(target, core.name))
        assert (t.dtype, t.dims, t.reshape_scalar) == (core.dtype, core.dims, core.reshape_scalar)
    for core in CORE_ENGINE_IO.outputs:
        assert table.output(core.name).dtype == core.dtype


def test_trtllm_0_21_names():
    """0.21's model reads min_tokens / seed (renamed before 0.20 branched; docs/repo.md):
    an input declared under the old name would load and be ignored."""
    names = TRTLLM_0_21_ENGINE_IO.input_names
    assert "min_tokens" in names and "seed" in names
    assert "min_length" not in names and "random_seed" not in names
    assert TRTLLM_0_21_ENGINE_IO.input("context_phase_params").dtype is TritonDType.UINT8
    assert len(set(names)) == len(names)
    assert len(set(TRTLLM_0_21_ENGINE_IO.output_names)) == len(TRTLLM_0_21_ENGINE_IO.outputs)


def test_router_is_core_minus_phase_handoff():
    assert "context_phase_params" not in ROUTER_IO.input_names
    assert "context_phase_params" not in ROUTER_IO.output_names
    assert set(ROUTER_IO.input_names) == (
        set(CORE_ENGINE_IO.input_names) - {"context_phase_params"} | set(INPUT_ALIASES)
        | set(TOKEN_COUNT_TENSORS) | {TIMING_INPUT, TOP_LOG_PROBS_INPUT})
    assert set(ROUTER_IO.output_names) == (
        set(CORE_ENGINE_IO.output_names) - {"context_phase_params"}
        | set(TOKEN_COUNT_TENSORS.values()) | {TIMING_OUTPUT}
        | {TOP_LOG_PROBS_OUTPUT, TOP_LOG_PROB_IDS_OUTPUT})
    assert ROUTER_IO.input(TIMING_INPUT).optional  # asked for, never required


def test_the_disaggregated_ensemble_carries_the_timing_through_postprocessing():
    assert (TIMING_INPUT, TIMING_INPUT) in ENGINE_STEP_MAP.inputs
    assert (TIMING_OUTPUT, "_PDTRT_TIMING") in ENGINE_STEP_MAP.outputs
    assert ("PDTRT_TIMING", "_PDTRT_TIMING") in POSTPROCESSING_STEP_MAP.inputs
    assert ("OUT_PDTRT_TIMING", TIMING_OUTPUT) in POSTPROCESSING_STEP_MAP.outputs
    assert {TIMING_INPUT, TIMING_OUTPUT} <= set(ensemble_io(ENGINE_STEP_MAP).input_names
                                                + ensemble_io(ENGINE_STEP_MAP).output_names)


@pytest.mark.parametrize("target", list(Target), ids=str)
def test_every_output_of_an_ensemble_comes_from_postprocessing(target):
    """So postprocessing can put each on every response (perf_analyzer reads every declared
    output of every response: ensemble.PASSED_OUTPUTS)."""
    for middle in (ENGINE_STEP_MAP, engine_step_map(target)):
        post = postprocessing_step_map(middle)
        from_post = {tensor for _, tensor in post.outputs}
        assert set(ensemble_io(middle).output_names) == from_post
        assert not from_post & {tensor for _, tensor in middle.outputs}
        for name, tensor in post.inputs:  # optional but the tokens: sent only when asked
            assert POSTPROCESSING_IO.input(name).optional is (
                name not in ("TOKENS_BATCH", "SEQUENCE_LENGTH")), tensor


def test_step_maps_name_existing_tensors():
    produced = {t.name: t for t in ENSEMBLE_IO.inputs}
    for io, step in ((PREPROCESSING_IO, PREPROCESSING_STEP_MAP), (ROUTER_IO, ENGINE_STEP_MAP),
                     (POSTPROCESSING_IO, POSTPROCESSING_STEP_MAP)):
        for model_name, tensor in step.inputs:
            assert tensor in produced, tensor
            assert io.input(model_name).dtype == produced[tensor].dtype
        for model_name, tensor in step.outputs:
            produced[tensor] = io.output(model_name)
    assert "text_output" in produced
    for model_name, _ in PREPROCESSING_STEP_MAP.inputs:
        PREPROCESSING_IO.input(model_name)


@pytest.mark.parametrize("target", list(Target), ids=str)
def test_the_aggregated_step_feeds_the_engine_under_its_own_names(target):
    table, step = engine_io(target), engine_step_map(target)
    # NVIDIA's 0.21 model has one name of each aliased input: the ensemble's core names feed it;
    # and it declares no token counts: its ensemble offers none. No engine gives the router's
    # timing: no aggregated ensemble offers it
    dropped = (set(INPUT_ALIASES) | set(TOKEN_COUNT_TENSORS) if target is Target.TRTLLM_0_21
               else set()) | {TIMING_INPUT}
    uncounted = (set(TOKEN_COUNT_TENSORS.values()) if target is Target.TRTLLM_0_21
                 else set()) | {TIMING_OUTPUT}
    assert [t for _, t in step.inputs] == [t for _, t in ENGINE_STEP_MAP.inputs
                                           if t not in dropped]
    assert [n for n, _ in step.outputs] == [n for n, _ in ENGINE_STEP_MAP.outputs
                                            if n not in uncounted]
    assert set(ensemble_io(step).input_names) == set(ENSEMBLE_IO.input_names) - dropped
    assert set(ensemble_io(step).output_names) == set(ENSEMBLE_IO.output_names) - uncounted
    assert len({n for n, _ in step.inputs}) == len(step.inputs)  # no model input fed twice
    fed = {t.name: t.dtype for t in ENSEMBLE_IO.inputs}
    for model_name, tensor in step.inputs:
        assert table.input(model_name).dtype == fed.get(tensor, table.input(model_name).dtype)
    assert dict(step.inputs).get("seed" if target is Target.TRTLLM_0_21
                                 else "random_seed") == "random_seed"


def test_numpy_names():
    assert TritonDType.STRING.numpy_name == "object"
    assert TritonDType.UINT64.numpy_name == "uint64"


@pytest.mark.parametrize(("role", "phase"), [
    (Role.PREFILL, Phase.PREFILL), (Role.DECODE, Phase.DECODE), (Role.AGGREGATED, None),
    (Role.ROUTER, None), (Role.PREPROCESSING, None), (Role.POSTPROCESSING, None),
], ids=str)
def test_a_role_serves_one_phase_alone_or_none(role, phase):
    assert role.phase is phase
    assert (role in PHASE_ROLES) is (role in (Role.PREFILL, Role.DECODE, Role.AGGREGATED))
    if phase is not None:
        assert Role.serving(phase) is role


def test_the_top_log_probs_travel_as_two_tensors_and_come_back_whole():
    """The alternatives of each token (pdtrt's engine models and router, not NVIDIA's C++
    model: it has no such tensors): [1, tokens, k] ids and log-probabilities, padded."""
    for io in (REFERENCE_ENGINE_IO, ROUTER_IO):
        assert io.input(TOP_LOG_PROBS_INPUT).optional
        assert io.output(TOP_LOG_PROBS_OUTPUT).dtype is TritonDType.FP32
        assert io.output(TOP_LOG_PROB_IDS_OUTPUT).dtype is TritonDType.INT32
    assert TOP_LOG_PROBS_INPUT not in TRTLLM_0_21_ENGINE_IO.input_names
    rows = [((5, -0.1), (7, -2.5)), ((9, -0.3),)]
    out = top_log_prob_outputs(rows, 2)
    assert out[TOP_LOG_PROB_IDS_OUTPUT].tolist() == [[[5, 7], [9, -1]]]
    assert out[TOP_LOG_PROBS_OUTPUT].shape == (1, 2, 2)
    back = top_log_probs_of(out)
    assert [[t for t, _ in row] for row in back] == [[5, 7], [9]]
    assert [v for row in back for _, v in row] == pytest.approx([-0.1, -2.5, -0.3])
    assert top_log_probs_of({}) is None
    assert RequestSampling(return_log_probs=True, num_top_log_probs=5).inputs()[
        TOP_LOG_PROBS_INPUT].tolist() == [[5]]
    assert TOP_LOG_PROBS_INPUT not in RequestSampling(return_log_probs=True).inputs()
