"""The LLM-API engine model against a fake Triton seam: the reference LLM API over the tiny
reference engine in memory, no server.

Requests go through ``TritonPythonModel.execute`` with :class:`FakeTriton` recording the
responses; an in-process transceiver stands in for UCX (the real transfer is tested in
tests/llmapi/test_reference_llm.py and test_kv_transfer.py).
"""

from __future__ import annotations

import json
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from pdtrt.engine_io import (
    ERROR_OUTPUT,
    KV_EVENTS_OUTPUT,
    Param,
    RequestSampling,
    RequestType,
    Role,
)
from pdtrt.kv_blocks import block_hashes
from pdtrt.llmapi import LLMApiImpl, load_llm_api
from pdtrt.runtime.engine.config import LLMEngineConfig, kv_reuse_options
from pdtrt.runtime.engine.model import TritonPythonModel
from pdtrt.runtime.faults import FaultInjection
from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_transceiver import FakeTransceiver
from tests.runtime.fake_triton import FakeRequest, FakeTriton

PROMPT = [5, 6, 7, 8]
OPTIONS = {"enable_iter_perf_stats": True, "max_batch_size": 4, "max_num_tokens": 64,
           "max_input_len": 16, "max_seq_len": 64, "sampler_type": "TRTLLMSampler",
           "kv_cache_config": {"tokens_per_block": 16}}
HOLD_S = 1.0
PHASE_OPTIONS = {**OPTIONS, "disable_overlap_scheduler": True,
                 "cache_transceiver_config": {"backend": "UCX", "kv_transfer_timeout_ms": 1000}}


class Gate:
    """Fault-injection hook that holds every batched decode step until ``open()``."""

    def __init__(self) -> None:
        self._open = threading.Event()

    def open(self) -> None:
        self._open.set()

    def before_decode(self, request_ids) -> None:
        assert self._open.wait(10), "the test never opened the gate"


@pytest.fixture
def engine_model(tiny_model):
    """``engine_model(role, kv=False, faults=None, reuse=False, sampler="TRTLLMSampler")``: a
    serving engine model on a fake seam; ``kv`` gives it the KV transceiver every model of the
    test shares, ``sampler`` its LLM's sampler_type (None: unset, auto)."""
    from pdtrt.llmapi.reference import LLM
    from pdtrt.llmapi.reference.engine import ReferenceEngine

    made = []
    engine = ReferenceEngine(tiny_model, tokens_per_block=16)
    clock = FakeClock()
    shared = FakeTransceiver(engine.layout, hold_s=HOLD_S, clock=clock)

    def make(role=Role.AGGREGATED, *, kv=False, faults=None, reuse=False,
             sampler="TRTLLMSampler", api=None):
        triton = FakeTriton()
        model = TritonPythonModel(triton, clock=clock)
        options = PHASE_OPTIONS if kv else OPTIONS
        if reuse:  # as the reference target's parameters make them (enable_block_reuse true)
            options = {**options, "kv_cache_config": {"tokens_per_block": 16,
                                                      **kv_reuse_options(True)}}
        # sampler None: no sampler_type, LlmArgs' default (auto)
        options = {**{k: v for k, v in options.items() if k != "sampler_type"},
                   **({} if sampler is None else {"sampler_type": sampler})}
        config = LLMEngineConfig(role=role, model=Path("in-memory"), options=options)
        llm = LLM._from_engine(engine, transceiver=shared if kv else None,
                               **options)
        model.setup(config, api or load_llm_api(LLMApiImpl.REFERENCE), llm, model_name=str(role),
                    faults=faults, model_config=tiny_model.config.to_dict())
        model.transceiver, model.fake_clock = shared, clock
        made.append(model)
        return model, triton

    yield make
    for model in made:
        model.finalize()


def request(ids=PROMPT, max_new=4, *, request_id="r1", streaming=True, exclude_input=True,
            request_type=None, **inputs):
    """An engine request as Triton hands it over (scalars reshaped to ``[batch]``)."""
    arrays = {"input_ids": np.array([ids], dtype=np.int32),
              "input_lengths": np.array([len(ids)], dtype=np.int32),
              "request_output_len": np.array([max_new], dtype=np.int32),
              "streaming": np.array([streaming]),
              "exclude_input_in_output": np.array([exclude_input]), **inputs}
    params = {} if request_type is None else {"request_type": str(request_type)}
    return FakeRequest(request_id, arrays, params)


def stop(request_id="r1"):
    return request(request_id=request_id, stop=np.array([True]))


def ended_once(req, error=None):
    """Exactly one final response, nothing after it; an error response iff ``error``."""
    req.wait_final()
    assert req.num_finals == 1 and not req.late, req.responses + req.late
    if error is None:
        assert req.errors == []
    else:
        assert len(req.errors) == 1 and error in req.errors[0], req.errors
    return True


# -- requests parsed at the edge ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("role", "req", "error"),
    [(Role.AGGREGATED, request(ids=[]), "input 'input_ids' is required and must not be empty"),
     (Role.AGGREGATED, request(ids=[1] * 17), "prompt of 17 tokens; this engine takes 1..16"),
     (Role.AGGREGATED, request(input_lengths=np.array([0], dtype=np.int32)),
      "input 'input_lengths' is 0 but 'input_ids' holds 4 tokens; allowed: exactly 4"),
     (Role.AGGREGATED, request(input_lengths=np.array([9], dtype=np.int32)),
      "input 'input_lengths' is 9 but 'input_ids' holds 4 tokens; allowed: exactly 4"),
     (Role.AGGREGATED, request(max_new=61), "exceeds max_seq_len 64"),
     (Role.AGGREGATED, request(max_new=0), "(or is < 1)"),
     (Role.AGGREGATED, request(ids=[5, 512]), "input_ids outside the vocabulary [0, 512)"),
     (Role.AGGREGATED, request(request_type="prefill_first"), "unknown request_type"),
     (Role.AGGREGATED, request(request_type=RequestType.CONTEXT_ONLY),
      "the aggregated model does not serve context_only requests"),
     (Role.DECODE, request(request_type=RequestType.GENERATION_ONLY),
      "generation_only requests need 'context_phase_params'"),
     (Role.DECODE, request(request_type=RequestType.GENERATION_ONLY,
                           context_phase_params=np.array([[1, 2, 3]], dtype=np.uint8)),
      "malformed context_phase_params"),
     (Role.AGGREGATED, stop(request_id=""), "a stop request needs the request id")],
    ids=["empty-prompt", "prompt-too-long", "zero-input-lengths", "input-lengths-too-big",
         "too-many-tokens", "no-tokens", "outside-vocabulary", "unknown-request-type",
         "phase-on-aggregated", "generation-without-params", "malformed-params",
         "anonymous-stop"])
def test_a_bad_request_gets_one_error_and_the_model_keeps_serving(engine_model, role, req,
                                                                   error):
    model, triton = engine_model(role, kv=role is not Role.AGGREGATED)
    model.execute([req])
    assert ended_once(req, error=error) and len(req.responses) == 1
    ok = request(request_id="ok")
    model.execute([ok])
    assert ended_once(ok) and len(ok.tokens) == 4
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0


# -- strict input: TensorRT-LLM's sampling rules (pdtrt/runtime/request_parsing.py cites them) --
def _f32(value):
    return np.array([value], dtype=np.float32)


def _i32(value):
    return np.array([value], dtype=np.int32)


NO_WORDS = np.array([[[0], [-1]]], dtype=np.int32)  # what the preprocessing sends: no words
STRICT_CASES = [
    ("temperature-nan", {"temperature": _f32(np.nan)},
     "input 'temperature' is nan; allowed: a finite number >= 0"),
    ("temperature-negative", {"temperature": _f32(-1)},
     "input 'temperature' is -1.0; allowed: a finite number >= 0"),
    ("temperature-inf", {"temperature": _f32(np.inf)},
     "input 'temperature' is inf; allowed: a finite number >= 0"),
    ("top-p-7", {"runtime_top_p": _f32(7)},
     "input 'runtime_top_p' (the ensemble's 'top_p') is 7.0; allowed: (0, 1], or 0 for none"),
    ("top-p-negative", {"runtime_top_p": _f32(-0.5)},
     "input 'runtime_top_p' (the ensemble's 'top_p') is -0.5; allowed: (0, 1], or 0 for none"),
    ("top-k-negative", {"runtime_top_k": _i32(-3)},
     "input 'runtime_top_k' (the ensemble's 'top_k') is -3; allowed: >= 0"),
    ("repetition-penalty-0", {"repetition_penalty": _f32(0)},
     "input 'repetition_penalty' is 0.0; allowed: a finite number > 0"),
    ("length-penalty-negative", {"len_penalty": _f32(-1)},
     "input 'len_penalty' (the ensemble's 'length_penalty') is -1.0; allowed: a finite number "
     ">= 0"),
    ("min-length-negative", {"min_length": _i32(-1)},
     "input 'min_length' is -1; allowed: >= 0"),
    ("presence-penalty-nan", {"presence_penalty": _f32(np.nan)},
     "input 'presence_penalty' is nan; allowed: a finite number"),
    ("beam-width-4", {"beam_width": _i32(4)},
     "input 'beam_width' is 4; allowed: 1..1 (the engine's max_beam_width)"),
    ("beam-width-0", {"beam_width": _i32(0)},
     "input 'beam_width' is 0; allowed: 1..1 (the engine's max_beam_width)"),
    ("two-prompts", {"input_ids": np.array([[5, 6], [7, 8]], dtype=np.int32),
                     "input_lengths": _i32([2, 2]).reshape(-1)},
     "input 'input_ids' holds 2 prompts; pdtrt serves one prompt per request"),
    ("stop-words-wrong-shape-engine-only",
     {"stop_words_list": np.array([[[7, 8], [2, -1], [0, 0]]], dtype=np.int32)},
     "input 'stop_words_list' has shape [1, 3, 2]; allowed: [1, 2, n]"),
    ("bad-words-offset-past-the-ids-engine-only",
     {"bad_words_list": np.array([[[7, 8], [3, -1]]], dtype=np.int32)},
     "input 'bad_words_list': word end offset 3 after 0 does not fit its 2 token ids"),
    ("stop-words-outside-the-vocabulary-engine-only",
     {"stop_words_list": np.array([[[7, 99999], [2, -1]]], dtype=np.int32)},
     "input 'stop_words_list': token ids [7, 99999] outside the vocabulary"),
]


@pytest.mark.parametrize(("inputs", "error"), [c[1:] for c in STRICT_CASES],
                         ids=[c[0] for c in STRICT_CASES])
def test_input_tensorrt_llm_refuses_is_refused_naming_it(engine_model, inputs, error):
    model, triton = engine_model()
    req = request(**inputs)
    model.execute([req])
    assert ended_once(req, error=error) and len(req.responses) == 1
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0
    ok = request(request_id="ok")
    model.execute([ok])
    assert ended_once(ok) and len(ok.tokens) == 4


@pytest.mark.parametrize("inputs", [
    {"temperature": _f32(0)}, {"runtime_top_p": _f32(0)}, {"runtime_top_p": _f32(1)},
    {"runtime_top_k": _i32(0)}, {"beam_width": _i32(1)}, {"repetition_penalty": _f32(1)},
    {"len_penalty": _f32(0)}, {"min_length": _i32(1)}, {"stop_words_list": NO_WORDS,
                                                        "bad_words_list": NO_WORDS}],
    ids=["temperature-0-greedy", "top-p-0-none", "top-p-1", "top-k-0", "beam-width-1",
         "repetition-penalty-1", "length-penalty-0", "min-length-1", "empty-word-lists"])
def test_the_edges_tensorrt_llm_allows_are_served(engine_model, inputs):
    model, _ = engine_model()
    req = request(**inputs)
    model.execute([req])
    assert ended_once(req) and len(req.tokens) == 4


# -- what the configured sampler would ignore (pdtrt/runtime/engine/sampler.py) ---------------
SAMPLED = {"temperature": _f32(0.7), "runtime_top_k": _i32(40)}
IGNORED_CASES = [
    ("repetition-penalty", {"repetition_penalty": _f32(1.3)},
     "ignores input 'repetition_penalty' (1.3; TensorRT-LLM #16485)"),
    ("presence-penalty", {"presence_penalty": _f32(0.5)},
     "ignores input 'presence_penalty' (0.5; TensorRT-LLM #16485)"),
    ("frequency-penalty", {"frequency_penalty": _f32(-0.25)},
     "ignores input 'frequency_penalty' (-0.25; TensorRT-LLM #16485)"),
    ("bad-words", {"bad_words_list": np.array([[[12], [1]]], dtype=np.int32)},
     "ignores input 'bad_words_list' (the ensemble's 'bad_words'; TensorRT-LLM #16052)"),
    ("seed-of-a-sampled-request", {"random_seed": np.array([5], dtype=np.uint64), **SAMPLED},
     "ignores input 'random_seed' (5) and draws every request's tokens from one generator "
     "seeded 42 (TensorRT-LLM #17172)"),
    ("min-length-2", {"min_length": _i32(2)},
     "counts the prompt's tokens toward input 'min_length' (2), so it bans the end id for "
     "fewer generated tokens or none (TensorRT-LLM #12166)"),
]


@pytest.mark.parametrize(("sampler", "named"), [
    ("TorchSampler", "TorchSampler"), (None, "TorchSampler (sampler_type auto)")],
    ids=["torch", "auto"])
@pytest.mark.parametrize(("inputs", "ignored"), [c[1:] for c in IGNORED_CASES],
                         ids=[c[0] for c in IGNORED_CASES])
def test_what_the_torch_sampler_would_ignore_is_refused_naming_the_fix(engine_model, sampler,
                                                                      named, inputs, ignored):
    model, triton = engine_model(sampler=sampler)
    req = request(**inputs)
    model.execute([req])
    assert ended_once(req, error=f"this engine samples with TensorRT-LLM 1.2's {named}, which "
                      f"{ignored}: set prefill.engine.sampler TRTLLMSampler to have it "
                      "applied, or leave it out") and len(req.responses) == 1
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0
    ok = request(request_id="ok")
    model.execute([ok])
    assert ended_once(ok) and len(ok.tokens) == 4


@pytest.mark.parametrize("inputs", [c[1] for c in IGNORED_CASES],
                         ids=[c[0] for c in IGNORED_CASES])
def test_the_c_plus_plus_sampler_serves_what_torch_sampler_would_ignore(engine_model, inputs):
    model, _ = engine_model(sampler="TRTLLMSampler")
    req = request(**inputs)
    model.execute([req])
    assert ended_once(req) and len(req.tokens) == 4


def test_every_ignored_input_is_named_with_the_pool_of_the_model(engine_model):
    model, _ = engine_model(Role.DECODE, kv=True, sampler="TorchSampler")
    req = request(repetition_penalty=_f32(1.3), bad_words_list=np.array([[[12], [1]]],
                                                                        dtype=np.int32))
    model.execute([req])
    ended_once(req, error="(1.3; TensorRT-LLM #16485); ignores input 'bad_words_list'")
    assert req.errors[0].endswith(": set decode.engine.sampler TRTLLMSampler to have them "
                                  "applied, or leave them out")


@pytest.mark.parametrize("inputs", [
    {"random_seed": np.array([5], dtype=np.uint64)}, {"min_length": _i32(1)},
    {"repetition_penalty": _f32(1), "presence_penalty": _f32(0), "frequency_penalty": _f32(0),
     "bad_words_list": NO_WORDS}, SAMPLED],
    ids=["seed-of-a-greedy-request", "min-length-1", "neutral-values", "sampled-without-seed"])
def test_what_torch_sampler_does_is_served(engine_model, inputs):
    torch, _ = engine_model(sampler="TorchSampler")
    trtllm, _ = engine_model(sampler="TRTLLMSampler")
    req, twin = request(**inputs), request(**inputs)
    torch.execute([req])
    trtllm.execute([twin])
    assert ended_once(req) and ended_once(twin) and len(req.tokens) == 4
    if inputs is not SAMPLED:  # greedy: the same tokens from either sampler
        assert req.tokens == twin.tokens


@pytest.mark.parametrize("built", [1, 4])
def test_the_beam_width_limit_comes_from_the_engine_manifest(tmp_path, built):
    from pdtrt.blueprint.manifest import EngineManifest, KVLayout, write_manifest
    from pdtrt.enums import KVDType, Phase, Target, WeightQuant
    from pdtrt.runtime.engine.config import max_beam_width

    write_manifest(tmp_path, EngineManifest(
        phase=Phase.DECODE, target=Target.REFERENCE, model="m", gpu_name=None,
        compute_capability=None, tp=1, pp=1, weights=WeightQuant.NONE,
        kv_layout=KVLayout(num_layers=1, num_kv_heads=1, head_dim=8, kv_dtype=KVDType.FP32,
                           tokens_per_block=16),
        versions={}, build_settings={"settings": {"max_beam_width": {"value": built}}},
        input_hashes={}, pdtrt_version="0"))
    assert max_beam_width(tmp_path) == built


# -- one final response ------------------------------------------------------------------------
def test_a_streaming_request_gets_its_tokens_then_one_final(engine_model):
    model, triton = engine_model()
    req = request(max_new=6)
    model.execute([req])
    assert ended_once(req) and len(req.tokens) == 6
    assert [len(r.tokens) for r in req.responses] == [1] * 6  # one token a response
    assert all("first_token_time_ns" in r.outputs for r in req.responses)
    assert triton.metrics["pdtrt_engine_requests_total"] == 1
    assert triton.metrics["pdtrt_engine_prompt_tokens_total"] == len(PROMPT)


@pytest.mark.parametrize(("exclude_input", "length"), [(True, 5), (False, 4 + 5)],
                         ids=["output-only", "prompt-and-output"])
def test_a_non_streaming_request_gets_one_response(engine_model, exclude_input, length):
    model, _ = engine_model()
    req = request(max_new=5, streaming=False, exclude_input=exclude_input)
    model.execute([req])
    assert ended_once(req) and len(req.responses) == 1 and len(req.tokens) == length


# -- stop and cancellation ---------------------------------------------------------------------
@pytest.mark.parametrize("how", ["stop-request", "client-cancel"])
def test_a_stopped_request_ends_once_and_counts_as_cancelled(engine_model, how):
    gate = Gate()
    model, triton = engine_model(faults=gate)
    req = request(max_new=50)
    model.execute([req])
    for _ in range(200):  # the first token comes from the prefill, before any decode step
        if req.responses:
            break
        threading.Event().wait(0.01)
    assert req.tokens and not req.num_finals
    if how == "stop-request":
        halt = stop()
        model.execute([halt])
        assert ended_once(halt) and halt.responses[0].outputs == {}
    else:
        req.cancel()
    gate.open()
    assert ended_once(req) and len(req.tokens) < 50
    assert triton.metrics["pdtrt_engine_cancelled_total"] == 1
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0


def test_a_stop_frees_no_held_kv_it_goes_at_the_transfer_timeout(engine_model):
    """TensorRT-LLM 1.2 ignores a stop (abort) of a finished context-only request: its KV stays
    held until kv_transfer_timeout_ms; the gauge says so, then drops when the timeout runs out."""
    model, triton = engine_model(Role.PREFILL, kv=True)
    ctx = request(request_type=RequestType.CONTEXT_ONLY, request_id="held-1", streaming=False)
    model.execute([ctx])
    assert ended_once(ctx) and "context_phase_params" in ctx.responses[0].outputs
    ucx = model.transceiver
    assert list(ucx.held) == [1] and triton.metrics["pdtrt_kv_held_buffers"] == 1
    halt = stop("held-1")
    model.execute([halt])
    assert ended_once(halt) and list(ucx.held) == [1]
    assert triton.metrics["pdtrt_kv_held_buffers"] == 1
    assert "pdtrt_kv_released_total" not in triton.metrics
    model.fake_clock.advance(HOLD_S)
    model.publish()
    assert not ucx.held and triton.metrics["pdtrt_kv_held_buffers"] == 0
    assert triton.metrics["pdtrt_kv_expired_total"] == 1


def test_a_context_request_ended_by_its_end_id_hands_no_kv_to_a_decode(engine_model, tiny_model):
    """An EOS as the first token ends the request at the prefill: finish reason "stop", no
    context_phase_params (so the router skips the decode), no KV held."""
    from tests.runtime.conftest import hf_greedy

    model, triton = engine_model(Role.PREFILL, kv=True)
    first = hf_greedy(tiny_model, PROMPT, 1)[0]
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False,
                  end_id=np.array([first], dtype=np.int32))
    model.execute([ctx])
    assert ended_once(ctx) and ctx.tokens == []
    assert "context_phase_params" not in ctx.responses[0].outputs
    assert not model.transceiver.held and triton.metrics["pdtrt_kv_held_buffers"] == 0


def test_a_context_request_asks_the_engine_for_one_token(engine_model):
    """TensorRT-LLM forces max_tokens 1 on a context-only request; the engine model's request
    output length (the client's) does not make the prefill generate more."""
    model, _ = engine_model(Role.PREFILL, kv=True)
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False, max_new=20)
    model.execute([ctx])
    assert ended_once(ctx) and len(ctx.tokens) == 1


def test_prefill_then_decode_gives_the_aggregated_tokens(engine_model):
    # one shared transceiver: the decode pulls what the prefill offered
    prefill, _ = engine_model(Role.PREFILL, kv=True)
    decode, triton = engine_model(Role.DECODE, kv=True)
    aggregated, _ = engine_model()
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False)
    prefill.execute([ctx])
    assert ended_once(ctx)
    params = ctx.responses[0].outputs["context_phase_params"]
    gen = request(max_new=6, request_type=RequestType.GENERATION_ONLY,
                  context_phase_params=params)
    decode.execute([gen])
    whole = request(max_new=6)
    aggregated.execute([whole])
    assert ended_once(gen) and ended_once(whole)
    assert gen.tokens == whole.tokens and gen.tokens[:1] == ctx.tokens
    assert triton.metrics["pdtrt_kv_transfers_total"] == 1
    # the decode prefilled nothing: its prompt came as KV
    assert triton.metrics.get("pdtrt_engine_prompt_tokens_total", 0) == 0
    again = request(max_new=6, request_type=RequestType.GENERATION_ONLY,
                    context_phase_params=params, request_id="again")
    decode.execute([again])  # the KV has been pulled: gone
    assert ended_once(again, error="KV transfer failed: the prefill instance no longer holds")


def _words(*words: list[int]) -> np.ndarray:
    """A [1, 2, n] word list, as NVIDIA's preprocessing builds it."""
    ids = [t for w in words for t in w]
    ends = list(np.cumsum([len(w) for w in words]))
    width = max(len(ids), 1)
    return np.array([[ids + [0] * (width - len(ids)), ends + [-1] * (width - len(ends))]],
                    dtype=np.int32)


def test_every_sampling_input_reaches_the_llm_api_under_its_name(engine_model):
    model, _ = engine_model()
    req = request(stop_words_list=_words([9], [10, 11]), bad_words_list=_words([12, 13], [14]),
                  repetition_penalty=_f32(1.2), presence_penalty=_f32(0.5),
                  frequency_penalty=_f32(0.25), min_length=_i32(3),
                  return_log_probs=np.array([True]), random_seed=np.array([5], dtype=np.uint64),
                  temperature=_f32(0.7), runtime_top_k=_i32(40))
    from pdtrt.runtime.request_parsing import parse_engine_request
    from pdtrt.runtime.triton_io import Incoming

    incoming = Incoming(request_id="r", parameters={}, inputs=dict(req.inputs))
    params = model._sampling_params(parse_engine_request(incoming, model.limits))
    assert (params.repetition_penalty, params.presence_penalty, params.frequency_penalty,
            params.min_tokens, params.logprobs, params.seed, params.top_k) == \
        (pytest.approx(1.2), 0.5, 0.25, 3, 1, 5, 40)
    assert params._get_stop_words() == [[9], [10, 11]] and params.include_stop_str_in_output
    assert params._get_bad_words() == [[14], [12, 13]]


def test_log_probs_go_out_per_response_and_cross_the_phases(engine_model):
    prefill, _ = engine_model(Role.PREFILL, kv=True)
    decode, _ = engine_model(Role.DECODE, kv=True)
    aggregated, _ = engine_model()
    asked = {"return_log_probs": np.array([True]), "repetition_penalty": _f32(1.3)}
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False, **asked)
    prefill.execute([ctx])
    assert ended_once(ctx)
    params = ctx.responses[0].outputs["context_phase_params"]
    gen = request(max_new=6, request_type=RequestType.GENERATION_ONLY,
                  context_phase_params=params, **asked)
    decode.execute([gen])
    whole = request(max_new=6, **asked)
    aggregated.execute([whole])
    assert ended_once(gen) and ended_once(whole) and gen.tokens == whole.tokens

    def logprobs(req):
        sent = [r.outputs for r in req.responses if "output_ids" in r.outputs]
        per_token = [v for o in sent for v in o["output_log_probs"].reshape(-1).tolist()]
        assert all(o["output_log_probs"].shape == (1, 1, o["output_ids"].shape[-1])
                   for o in sent)
        return per_token, float(sent[-1]["cum_log_probs"].reshape(-1)[0])

    (got, got_cum), (want, want_cum) = logprobs(gen), logprobs(whole)
    assert len(got) == 6 and got == pytest.approx(want, abs=1e-5)
    assert got_cum == pytest.approx(want_cum, abs=1e-4)
    assert got[0] == pytest.approx(logprobs(ctx)[0][0], abs=1e-6)  # the prefill's, carried
    assert got_cum == pytest.approx(sum(want), abs=1e-4) and all(v <= 0 for v in got)
    plain = request(max_new=3, request_id="plain")
    aggregated.execute([plain])
    assert ended_once(plain) and all("output_log_probs" not in r.outputs
                                     for r in plain.responses)


# -- engine failures ---------------------------------------------------------------------------
def test_an_engine_failure_after_data_goes_in_band_then_ends_once(engine_model):
    model, triton = engine_model(faults=FaultInjection(("fault-",)))
    req = request(max_new=8, request_id="fault-1")
    model.execute([req])
    assert ended_once(req, error="injected decode-step fault")
    tokens, in_band, error, final = req.responses
    assert tokens.tokens and not tokens.final  # the first token, from the prefill
    assert in_band.outputs[ERROR_OUTPUT].reshape(-1)[0].decode() == error.error
    assert not error.final and final.final and final.outputs == {} and final.error is None
    assert triton.metrics["pdtrt_engine_failed_total"] == 1


def test_a_bls_caller_gets_a_failure_after_data_in_band_and_no_error_response(engine_model):
    """The router names its outputs, the in-band one among them: an error response after data
    would keep its BLS stream from ever ending (and its stub from finalizing)."""
    model, _ = engine_model(faults=FaultInjection(("fault-",)))
    req = request(max_new=8, request_id="fault-4")
    req.requested_outputs = ("output_ids", "sequence_length", ERROR_OUTPUT)
    model.execute([req])
    req.wait_final()
    tokens, in_band, final = req.responses
    assert tokens.tokens and not tokens.final
    assert in_band.outputs[ERROR_OUTPUT].reshape(-1)[0].decode() == (
        "engine failure: injected decode-step fault (PDTRT_FAULT_INJECTION) for request "
        "'fault-4'")
    assert req.errors == [] and final.final and final.outputs == {}


def test_an_ensemble_step_gets_a_failure_after_data_as_one_final_error(engine_model):
    """An ensemble asks for its step's outputs only and runs its next step on every response:
    no in-band response, one error response that ends the request."""
    model, _ = engine_model(faults=FaultInjection(("fault-",)))
    req = request(max_new=8, request_id="fault-3")
    req.requested_outputs = ("output_ids", "sequence_length")
    model.execute([req])
    assert ended_once(req, error="injected decode-step fault")
    tokens, error = req.responses
    assert tokens.tokens and not tokens.final
    assert error.final and error.outputs == {}


def test_an_engine_failure_before_data_is_one_error_response(engine_model):
    model, _ = engine_model(faults=FaultInjection(("fault-",)))
    req = request(max_new=8, request_id="fault-2", streaming=False)
    model.execute([req])
    assert ended_once(req, error="engine failure: injected decode-step fault")
    assert len(req.responses) == 1 and req.responses[0].final


# -- the server stops --------------------------------------------------------------------------
def _first_token(req):
    for _ in range(500):  # the first token comes from the prefill, before any decode step
        if req.responses:
            return True
        threading.Event().wait(0.01)
    return False


def test_a_drain_ends_every_request_in_flight_with_an_error_and_refuses_new_ones(engine_model):
    gate = Gate()
    model, triton = engine_model(faults=gate)
    streams = [request(max_new=50, request_id=f"s{i}") for i in range(3)]
    model.execute(streams)
    assert all(_first_token(r) for r in streams)
    triton.stop_server()  # SIGTERM to the server: the stub's models hear of it
    late = request(request_id="late")
    model.execute([late])
    gate.open()
    for req in streams:
        assert ended_once(req, error="the server is shutting down") and len(req.tokens) < 50
    assert ended_once(late, error="the server is shutting down") and late.tokens == []
    for _ in range(200):
        if model.llm._scheduler.num_active == 0:
            break
        threading.Event().wait(0.01)
    assert model.llm._scheduler.num_active == 0  # the stopped sequences left the engine
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0


def test_finalize_ends_what_is_left_stops_its_threads_and_releases_the_seam(engine_model):
    gate = Gate()
    model, triton = engine_model(Role.PREFILL, kv=True, faults=gate)
    req = request(max_new=50)
    model.execute([req])
    assert _first_token(req)
    gate.open()
    model.finalize()
    assert ended_once(req, error="the server is shutting down")
    assert triton.released and not model.llm._scheduler._thread.is_alive()  # noqa: SLF001


def test_an_instance_pins_its_gpus_before_the_llm_api_loads(monkeypatch):
    """trtllm-1.2's ``gpu_device_ids``: instance 1 of ``0,1;2,3`` sees GPUs 2 and 3 when
    ``tensorrt_llm`` is imported (CUDA and the LLM API's MPI workers read it at start)."""
    import os

    from tests.runtime.fake_triton import model_args

    seen, options = [], []

    def load_llm_api():
        seen.append((os.environ.get("CUDA_VISIBLE_DEVICES"),
                     os.environ.get("TRTLLM_VISIBLE_DEVICES")))
        raise RuntimeError("stop here")

    class Model(TritonPythonModel):
        @staticmethod
        def check(api, config):
            options.append(config.options)

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "unset by the test")
    monkeypatch.setenv("TRTLLM_VISIBLE_DEVICES", "unset by the test")
    args = model_args("prefill", {Param.ROLE: Role.PREFILL, Param.LLM_MODEL: "/models/llama",
                                  Param.GPU_DEVICE_IDS: "0,1;2,3"}, instance=1)
    with pytest.raises(RuntimeError, match="stop here"):
        Model(FakeTriton(), load_api=load_llm_api).initialize(args)
    # TRTLLM_VISIBLE_DEVICES: what MpiPoolSession forwards to the LLM API's MPI workers
    assert seen == [("2,3", "2,3")]

    def loaded():
        return types.SimpleNamespace()

    with pytest.raises(AttributeError):  # past the check, the LLM is built with the options
        Model(FakeTriton(), load_api=loaded).initialize(args)
    assert options == [{"gpus_per_node": 2}]  # the instance's GPUs, as upstream's model sets


def test_stats_are_not_asked_for_before_the_first_request(engine_model, caplog):
    """TensorRT-LLM's get_stats warns "No stats available" when called before any request:
    the engine model's half-second poll must not fill the server log with it."""
    import logging

    caplog.set_level(logging.WARNING, logger="pdtrt.llmapi.reference.llm")
    model, _triton = engine_model()
    model.publish()
    model.publish()
    assert "No stats available" not in caplog.text
    req = request()
    model.execute([req])
    assert ended_once(req)
    model.publish()
    assert "No stats available" not in caplog.text


# -- KV events for the router's index ----------------------------------------------------------
def kv_events(model, cursor=""):
    ask = request(request_id="pdtrt-kv-events-1",
                  kv_events_cursor=np.array([cursor.encode()], dtype=np.object_))
    model.execute([ask])
    assert ended_once(ask)
    return json.loads(ask.responses[-1].outputs[KV_EVENTS_OUTPUT].reshape(-1)[0])


def test_the_engine_tells_a_router_which_blocks_it_holds(engine_model):
    model, _ = engine_model(reuse=True)
    first = kv_events(model)
    assert first["snapshot"] == []
    prompt = list(range(3, 19))  # one full block of 16
    req = request(prompt, 2)
    model.execute([req])
    assert ended_once(req)
    changes = kv_events(model, f"{first['epoch']}:{first['seq']}")
    assert "snapshot" not in changes and changes["epoch"] == first["epoch"]
    assert [h for op, hashes in changes["changes"] if op == "+" for h in hashes] == \
        block_hashes(prompt, 16)  # TensorRT-LLM's hash of that block, and only it
    again = kv_events(model, "another-epoch:3")  # not this instance's cursor: a snapshot
    assert again["snapshot"] == block_hashes(prompt, 16)


def test_an_engine_without_block_reuse_says_so_to_a_router(engine_model):
    model, _ = engine_model()
    ask = request(kv_events_cursor=np.array([b""], dtype=np.object_))
    model.execute([ask])
    assert ended_once(ask, error="records no KV cache events")
    req = request()
    model.execute([req])
    assert ended_once(req)  # and keeps serving


# -- the library it runs on (pdtrt.llmapi.check) ------------------------------------------------
def _recording(cls, seen: list):
    """``cls`` as a factory that records the keywords of every instance made."""
    def make(**kwargs):
        seen.append(set(kwargs))
        return cls(**kwargs)
    make.__wrapped__ = cls
    return make


@pytest.mark.parametrize("shape", ["pinned-1.2", "with-cherry-picks", "main-1.3"])
def test_disaggregated_requests_serve_on_each_release_shape_of_the_params(engine_model, shape):
    """Release/1.2's DisaggregatedParams has no first_gen_log_probs: an unknown keyword there is
    a TypeError on every decode request. The engine model passes it only where the class has
    it, and the first token's log-probability crosses the phases either way."""
    from pdtrt.llmapi.reference.params import DisaggregatedParams
    from tests.llmapi.twin_surfaces import (
        DisaggregatedParams13,
        DisaggregatedParamsWithLogprobs,
        reference_api,
    )

    cls = {"pinned-1.2": DisaggregatedParams, "with-cherry-picks": DisaggregatedParamsWithLogprobs,
           "main-1.3": DisaggregatedParams13}[shape]
    seen: list[set] = []
    api = reference_api(DisaggregatedParams=_recording(cls, seen))
    prefill, _ = engine_model(Role.PREFILL, kv=True, api=api)
    decode, _ = engine_model(Role.DECODE, kv=True, api=api)
    aggregated, _ = engine_model()
    asked = {"return_log_probs": np.array([True])}
    ctx = request(request_type=RequestType.CONTEXT_ONLY, streaming=False, **asked)
    prefill.execute([ctx])
    assert ended_once(ctx)
    gen = request(max_new=5, request_type=RequestType.GENERATION_ONLY, **asked,
                  context_phase_params=ctx.responses[0].outputs["context_phase_params"])
    decode.execute([gen])
    whole = request(max_new=5, **asked)
    aggregated.execute([whole])
    assert ended_once(gen) and ended_once(whole) and gen.tokens == whole.tokens

    def per_token(req):
        return [v for r in req.responses if "output_log_probs" in r.outputs
                for v in r.outputs["output_log_probs"].reshape(-1).tolist()]

    assert per_token(gen) == pytest.approx(per_token(whole), abs=1e-5)
    generation_keywords = seen[-1]
    assert ("first_gen_log_probs" in generation_keywords) == (shape != "pinned-1.2")
    assert {"request_type", "first_gen_tokens", "opaque_state"} <= generation_keywords


def test_a_release_without_a_field_the_model_needs_is_refused_at_load_by_name(engine_model):
    from pdtrt.errors import LLMApiMismatchError
    from pdtrt.llmapi.reference.params import DisaggregatedParams
    from tests.llmapi.twin_surfaces import reference_api, without

    api = reference_api(DisaggregatedParams=without(DisaggregatedParams, "opaque_state"),
                        version="1.1.0")
    with pytest.raises(LLMApiMismatchError, match=r"reference 1\.1\.0 lacks .*"
                       r"DisaggregatedParams\.opaque_state") as err:
        engine_model(Role.DECODE, kv=True, api=api)
    assert "1.2.1" in err.value.hint


def test_an_option_the_release_lacks_is_refused_before_the_llm_starts(tmp_path):
    """The options file names a key of a newer LlmArgs: the load stops, naming it, before the
    LLM API is constructed."""
    from pydantic import BaseModel, ConfigDict

    from pdtrt.errors import LLMApiMismatchError
    from tests.llmapi.twin_surfaces import reference_api
    from tests.runtime.fake_triton import model_args

    class OlderTransceiver(BaseModel):
        model_config = ConfigDict(extra="forbid")
        backend: str | None = None

    class OlderArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        max_batch_size: int = 2048
        cache_transceiver_config: OlderTransceiver | None = None

    built = []
    api = reference_api(LlmArgs=OlderArgs, LLM=lambda *a, **k: built.append(k))
    options = tmp_path / "options.yaml"
    options.write_text("max_batch_size: 4\nsampler_type: auto\ncache_transceiver_config:\n"
                       "  backend: UCX\n  kv_transfer_timeout_ms: 1000\n")
    args = model_args("decode", {Param.ROLE: Role.DECODE, Param.LLM_MODEL: "/models/llama",
                                 Param.LLM_OPTIONS: str(options)})
    with pytest.raises(LLMApiMismatchError) as err:
        TritonPythonModel(FakeTriton(), load_api=lambda: api).initialize(args)
    assert "LLM-API option sampler_type" in err.value.message
    assert "LLM-API option cache_transceiver_config.kv_transfer_timeout_ms" in err.value.message
    assert built == []


def test_log_probs_are_read_by_token_and_a_missing_one_is_nan_not_a_failed_request(caplog):
    """Upstream's entry per token is the sampler's top-k, which may lack the sampled token; a
    release without first_gen_log_probs has no entry for the first tokens (the list is shorter
    at the front). Neither may cost the request its answer."""
    import math
    from types import SimpleNamespace

    from pdtrt.llmapi.reference.outputs import Logprob
    from pdtrt.runtime.engine.responder import Responder
    from pdtrt.runtime.phase_params import ContextPhaseParams

    out = Responder.__new__(Responder)
    out.request = SimpleNamespace(context_phase_params=None, request_id="r1",
                                  sampling=RequestSampling(return_log_probs=True))
    step = SimpleNamespace(token_ids=[5, 6, 7],
                           logprobs=[{5: Logprob(-0.1, 1)}, {8: Logprob(-0.2, 1)},
                                     {7: Logprob(-0.3, 1), 9: Logprob(-1.0, 2)}])
    got, top = out._logprobs(step, 0, [5, 6, 7])
    assert got[0] == -0.1 and math.isnan(got[1]) and got[2] == -0.3 and top == []
    assert "no log-probability for its token 6" in caplog.text

    out.request = SimpleNamespace(request_id="r2", context_phase_params=ContextPhaseParams(
        ctx_request_id=1, first_gen_tokens=(5,), opaque_state=b"", draft_tokens=None,
        prompt_len=4, first_gen_log_probs=(-0.05,)), sampling=RequestSampling(
            return_log_probs=True))
    shorter = SimpleNamespace(token_ids=[5, 6], logprobs=[{6: Logprob(-0.4, 1)}])
    assert out._logprobs(shorter, 0, [5, 6])[0] == [-0.05, -0.4]  # the prefill's, the engine's


def test_the_alternatives_are_each_entrys_k_best_and_the_first_tokens_come_from_the_prefill():
    """``num_top_log_probs`` k: each token's k best, best first -- not the chosen token that
    upstream's entry may hold outside its top-k --, and a generation-only request's first
    tokens take the alternatives the prefill put in context_phase_params."""
    from types import SimpleNamespace

    from pdtrt.llmapi.reference.outputs import Logprob
    from pdtrt.runtime.engine.responder import Responder
    from pdtrt.runtime.phase_params import ContextPhaseParams

    out = Responder.__new__(Responder)
    out.request = SimpleNamespace(context_phase_params=None, request_id="r1",
                                  sampling=RequestSampling(return_log_probs=True,
                                                           num_top_log_probs=2))
    step = SimpleNamespace(token_ids=[5, 6], logprobs=[
        {3: Logprob(-0.5, 1), 5: Logprob(-1.0, 2)},
        {4: Logprob(-0.2, 1), 7: Logprob(-1.9, 2), 6: Logprob(-3.0, 9)}])  # chosen: rank 9
    values, top = out._logprobs(step, 0, [5, 6])
    assert values == [-1.0, -3.0]
    assert top == [((3, -0.5), (5, -1.0)), ((4, -0.2), (7, -1.9))]

    first = ((11, -0.1), (5, -2.0))
    out.request = SimpleNamespace(request_id="r2", context_phase_params=ContextPhaseParams(
        ctx_request_id=1, first_gen_tokens=(5,), opaque_state=b"", draft_tokens=None,
        prompt_len=4, first_gen_log_probs=(-2.0,), first_gen_top_log_probs=(first,)),
        sampling=out.request.sampling)
    shorter = SimpleNamespace(token_ids=[5, 6], logprobs=[{6: Logprob(-0.4, 1),
                                                           2: Logprob(-1.5, 2)}])
    assert out._logprobs(shorter, 0, [5, 6]) == ([-2.0, -0.4], [first, ((6, -0.4), (2, -1.5))])


def test_finalize_times_its_steps_with_the_injected_clock(caplog):
    from pdtrt.runtime.engine.model import _left, _timed

    clock = FakeClock()
    with caplog.at_level("WARNING"), _timed("drain", clock):
        clock.advance(2.5)  # no real time passes: only the injected clock says 2.5 s
    assert "finalize: drain took 2.5 s" in caplog.text
    assert _left(clock() + 3.0, clock) == 3.0
