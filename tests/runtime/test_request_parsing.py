"""Requests parsed at the edge: the router refuses exactly what the engine models refuse, with
the same message, before any phase is asked; the preprocessing refuses more than one prompt."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pdtrt.errors import InvalidRequestError
from pdtrt.runtime.request_parsing import parse_router_request
from pdtrt.runtime.triton_io import Incoming
from tests.runtime.fake_triton import FakeRequest, FakeTriton, model_args, tokens_out
from tests.runtime.test_engine_model import STRICT_CASES

# The engine-only cases: word lists, which only the engine checks against its vocabulary --
# everything else the router refuses itself.
_ENGINE_ONLY = ("engine-only",)
ROUTER_CASES = [c for c in STRICT_CASES if not c[0].endswith(_ENGINE_ONLY)]


def _incoming(**inputs: np.ndarray) -> Incoming:
    arrays = {"input_ids": np.array([[5, 6, 7, 8]], dtype=np.int32),
              "input_lengths": np.array([4], dtype=np.int32),
              "request_output_len": np.array([4], dtype=np.int32), **inputs}
    return Incoming(request_id="r1", parameters={}, inputs=arrays)


@pytest.mark.parametrize(("inputs", "error"), [c[1:] for c in ROUTER_CASES],
                         ids=[c[0] for c in ROUTER_CASES])
def test_the_router_refuses_what_the_engines_refuse_with_their_message(inputs, error):
    with pytest.raises(InvalidRequestError) as info:
        parse_router_request(_incoming(**inputs))
    assert error in info.value.message


def test_the_router_refuses_before_asking_any_phase():
    from pdtrt.engine_io import Param
    from pdtrt.runtime.router.model import TritonPythonModel

    triton = FakeTriton(lambda call: [tokens_out(7)])
    model = TritonPythonModel(triton)
    model.initialize(model_args("router", {Param.PREFILL_MODEL: "prefill",
                                           Param.DECODE_MODEL: "decode"}))
    try:
        req = FakeRequest("r1", {**_incoming().inputs,
                                 "temperature": np.array([np.nan], dtype=np.float32)})
        asyncio.run(model.execute([req]))
        assert req.num_finals == 1 and req.errors == [
            "input 'temperature' is nan; allowed: a finite number >= 0"]
        assert [c for c in triton.calls if c.request_id.startswith("r1")] == []  # no phase asked
    finally:
        model.finalize()


def test_the_beam_width_behind_the_router_is_one():
    with pytest.raises(InvalidRequestError, match=r"'beam_width' is 2; allowed: 1\.\.1"):
        parse_router_request(_incoming(beam_width=np.array([2], dtype=np.int32)))
    assert parse_router_request(_incoming(beam_width=np.array([1], dtype=np.int32))).prompt == (
        5, 6, 7, 8)


def test_the_router_reads_the_stop_words_in_the_engines_layout():
    """It ends a request whose first token completes one (docs/design/serve.md); a malformed list is
    refused as the engines refuse it, token ids are left to the engines' vocabulary check."""
    words = np.array([[[7, 8, 99999, 0], [1, 3, 4, -1]]], dtype=np.int32)
    assert parse_router_request(_incoming(stop_words_list=words)).stop_words == (
        (7,), (8, 99999), (0,))
    assert parse_router_request(_incoming()).stop_words == ()
    with pytest.raises(InvalidRequestError, match=r"has shape \[1, 3, 2\]; allowed: \[1, 2, n\]"):
        parse_router_request(_incoming(stop_words_list=np.zeros((1, 3, 2), dtype=np.int32)))


class _Tokenizer:
    """A byte-level stand-in with transformers' encode signature."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]


@pytest.fixture
def preprocessing():
    from pdtrt.runtime.text.preprocessing import TritonPythonModel

    model = TritonPythonModel(FakeTriton())
    model.tokenizer, model.end_id, model.pad_id = _Tokenizer(), 2, 0
    return model


def _query(*texts: str, **extra: np.ndarray) -> FakeRequest:
    return FakeRequest("r1", {"QUERY": np.array([[t.encode()] for t in texts], dtype=object),
                              "REQUEST_OUTPUT_LEN": np.array([[4]] * len(texts), dtype=np.int32),
                              **extra})


def test_the_preprocessing_refuses_two_prompts_naming_the_ensemble_input(preprocessing):
    (refused,) = preprocessing.execute([_query("Hello", "World")])
    assert refused.error == ("input 'text_input' holds 2 prompts; pdtrt serves one prompt per "
                             "request: send each prompt as its own request")
    (ok,) = preprocessing.execute([_query("Hello")])
    assert ok.error is None and ok.outputs["INPUT_ID"].tolist() == [[72, 101, 108, 108, 111]]
    assert ok.outputs["REQUEST_INPUT_LEN"].tolist() == [[5]]


@pytest.mark.parametrize(("name", "output"), [("STOP_WORDS_DICT", "STOP_WORDS_IDS"),
                                              ("BAD_WORDS_DICT", "BAD_WORDS_IDS")])
def test_the_preprocessing_turns_each_word_into_a_word_list_entry(preprocessing, name, output):
    (one,) = preprocessing.execute([_query("Hello", **{
        name: np.array([[b"ab", b"", b"c"]], dtype=object)})])
    # the byte-level stand-in: "ab" -> 97 98, "c" -> 99; ends 2 and 3; "" is no word
    assert one.error is None and one.outputs[output].tolist() == [[[97, 98, 99], [2, 3, -1]]]
    (none,) = preprocessing.execute([_query("Hello", **{name: np.array([[b""]], dtype=object)})])
    assert none.outputs[output].tolist() == [[[0], [-1]]]


# NVIDIA's current names (min_tokens, seed) beside pdtrt's older ones (engine_io.INPUT_ALIASES)
_ALIASED = [("min_length", "min_tokens", np.int32, 3), ("random_seed", "seed", np.uint64, 42)]


def _engine_limits():
    from pdtrt.engine_io import Role
    from pdtrt.runtime.request_parsing import EngineLimits

    return EngineLimits(role=Role.AGGREGATED, max_input_len=64, max_seq_len=128,
                        vocab_size=1000, serves_phases=False)


@pytest.mark.parametrize(("core", "alias", "dtype", "value"), _ALIASED,
                         ids=[a[1] for a in _ALIASED])
@pytest.mark.parametrize("name_given", ["core", "alias"])
def test_either_name_of_an_aliased_input_is_read(core, alias, dtype, value, name_given):
    from pdtrt.runtime.request_parsing import parse_engine_request

    name = core if name_given == "core" else alias
    incoming = _incoming(**{name: np.array([value], dtype=dtype)})
    sampling = parse_engine_request(incoming, _engine_limits()).sampling
    assert (sampling.min_tokens, sampling.seed) == (
        (value, None) if core == "min_length" else (0, value))
    # the router hands its phases the core name only, in the phases' [1, 1] shape
    routed = parse_router_request(incoming).inputs
    assert alias not in routed and routed[core].tolist() == [[value]]


@pytest.mark.parametrize(("core", "alias", "dtype", "value"), _ALIASED,
                         ids=[a[1] for a in _ALIASED])
def test_both_names_of_one_input_are_refused_naming_both(core, alias, dtype, value):
    from pdtrt.runtime.request_parsing import parse_engine_request

    incoming = _incoming(**{core: np.array([value], dtype=dtype),
                            alias: np.array([value], dtype=dtype)})
    want = f"inputs '{core}' and '{alias}' are both given"
    for parse in (parse_router_request, lambda r: parse_engine_request(r, _engine_limits())):
        with pytest.raises(InvalidRequestError, match=want):
            parse(incoming)


def test_an_aliased_input_is_checked_like_the_core_one():
    with pytest.raises(InvalidRequestError, match=r"'min_length' is -1; allowed: >= 0"):
        parse_router_request(_incoming(min_tokens=np.array([-1], dtype=np.int32)))
