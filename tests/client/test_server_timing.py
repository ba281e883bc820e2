"""The server's timing on the client: parsing the router's JSON, asking only a model that takes
the question, and the result carrying what the final response said."""

from __future__ import annotations

import json

import pytest
from fake_transport import ENSEMBLE_INPUTS, FakeHub

from pdtrt.client import GenerateRequest, LLMClient, ModelSignature, StreamEvent, build_inputs
from pdtrt.client.timing import TTFT_PHASE_FIELDS, ServerTiming
from pdtrt.engine_io import TIMING_INPUT
from pdtrt.errors import RequestError

# what the router sends (pdtrt.runtime.router.timing), early_first_token on
ROUTER_JSON = json.dumps({
    "ttft_ms": 12.5, "queue_ms": 0.5, "prefill_ms": 12.0, "decode_queue_ms": 0.0,
    "kv_transfer_ms": 0.0, "first_decode_ms": 0.0, "e2e_ms": 40.0, "path": "disaggregated",
    "output_tokens": 3, "migrations": 0, "phases_ms": {"queue": 0.5, "prefill": 12.0}})
TIMED_INPUTS = {**ENSEMBLE_INPUTS, TIMING_INPUT: "BOOL"}


def test_parse_keeps_the_ttft_its_five_phases_and_the_path():
    t = ServerTiming.parse(ROUTER_JSON)
    assert (t.ttft_ms, t.path) == (12.5, "disaggregated")
    assert t.phases_ms == {"queue_ms": 0.5, "prefill_ms": 12.0, "decode_queue_ms": 0.0,
                           "kv_transfer_ms": 0.0, "first_decode_ms": 0.0}
    assert list(t.phases_ms) == list(TTFT_PHASE_FIELDS)


@pytest.mark.parametrize(("text", "match"), [
    ("{", "not JSON"),
    ("[1]", "not a JSON object"),
    (json.dumps({"ttft_ms": 1.0}), "no number in 'queue_ms'"),
    (ROUTER_JSON.replace('"prefill_ms": 12.0', '"prefill_ms": "12"'), "'prefill_ms'"),
    (ROUTER_JSON.replace('"ttft_ms": 12.5', '"ttft_ms": true'), "'ttft_ms'"),
], ids=["not-json", "not-object", "missing", "string", "bool"])
def test_parse_refuses_what_is_not_the_routers_timing(text, match):
    with pytest.raises(RequestError, match=match):
        ServerTiming.parse(text)


@pytest.mark.parametrize(("inputs", "asked", "sent"), [
    (TIMED_INPUTS, True, True),
    (TIMED_INPUTS, False, False),
    (ENSEMBLE_INPUTS, True, False),  # NVIDIA's / the aggregated ensemble: not asked, no error
], ids=["declared", "not-asked", "undeclared"])
def test_the_timing_is_asked_only_of_a_model_that_declares_it(inputs, asked, sent):
    sig = ModelSignature(name="ensemble", inputs=inputs, max_batch_size=1)
    tensors = {t.name: t for t in build_inputs(
        GenerateRequest(prompt="hi", max_tokens=2, return_timing=asked), sig)}
    assert (TIMING_INPUT in tensors) is sent
    if sent:
        assert tensors[TIMING_INPUT].values == (True,)
        assert tensors[TIMING_INPUT].datatype == "BOOL"


def _timed_script(timing: str):
    """Two tokens, then a final response with the timing and empty text (what the ensemble
    sends when every token was streamed before the router finished)."""
    def script(model, tensors, request_id):
        return [(0.01, StreamEvent(text=" a")), (0.01, StreamEvent(text=" b")),
                (0.0, StreamEvent(text="", timing=timing, final=True))]
    return script


def test_the_result_carries_the_final_responses_timing():
    hub = FakeHub(_timed_script(ROUTER_JSON), models={"ensemble": TIMED_INPUTS})
    with LLMClient("fake", transport_factory=hub, clock=hub.clock) as client:
        result = client.generate(GenerateRequest(prompt="hi", max_tokens=2,
                                                 return_timing=True))
    assert result.ok and result.num_chunks == 2  # empty text is not a token
    assert result.timing == ServerTiming.parse(ROUTER_JSON)


def test_a_malformed_timing_is_dropped_not_the_request(caplog):
    hub = FakeHub(_timed_script("not json"), models={"ensemble": TIMED_INPUTS})
    with LLMClient("fake", transport_factory=hub, clock=hub.clock) as client:
        result = client.generate(GenerateRequest(prompt="hi", max_tokens=2,
                                                 return_timing=True))
    assert result.ok and result.timing is None
    assert "pdtrt_timing is not JSON" in caplog.text
