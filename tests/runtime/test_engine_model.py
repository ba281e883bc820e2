"""The engine model against a fake Triton seam: the tiny reference engine in memory, no server.

Requests go through ``TritonPythonModel.execute`` with :class:`FakeTriton` recording the
responses; a fake KV node stands in for UCX (the real transfer is tested in
test_kv_transfer.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from pdtrt.engine_io import ERROR_OUTPUT, RequestType, Role
from pdtrt.errors import KVTransferError
from pdtrt.runtime.engine_model import EngineConfig, TritonPythonModel
from pdtrt.runtime.faults import FaultInjection
from pdtrt.runtime.kv_transfer import TransferStats
from tests.runtime.fake_triton import FakeRequest, FakeTriton

PROMPT = [5, 6, 7, 8]


class FakeKVNode:
    """The :class:`~pdtrt.runtime.kv_transfer.UcxKVNode` calls the engine model makes, in one
    process: offered buffers are held until pulled or released."""

    address = b"fake-ucx-worker"

    def __init__(self) -> None:
        self.stats = TransferStats()
        self.released: list[int] = []

    def offer(self, buffer: np.ndarray) -> int:
        transfer_id = len(self.released) + self.stats.offered + 1
        self.stats.held[transfer_id] = (buffer, float("inf"))
        self.stats.offered += 1
        return transfer_id

    def is_held(self, transfer_id: int) -> bool:
        return transfer_id in self.stats.held

    def release(self, transfer_id: int) -> bool:
        self.released.append(transfer_id)
        found = self.stats.held.pop(transfer_id, None) is not None
        self.stats.released += found
        return found

    def pull(self, address: bytes, transfer_id: int, nbytes: int) -> np.ndarray:
        held = self.stats.held.pop(transfer_id, None)
        if held is None:
            raise KVTransferError(f"the prefill instance no longer holds KV transfer "
                                  f"{transfer_id:x}")
        return held[0]

    def stop(self) -> None:
        pass


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
    """``engine_model(role, ucx=None, faults=None)``: a serving engine model on a fake seam."""
    from pdtrt.runtime.reference_engine import ReferenceEngine

    made = []

    def make(role=Role.AGGREGATED, *, ucx=None, faults=None):
        triton = FakeTriton()
        model = TritonPythonModel(triton)
        config = EngineConfig(role=role, engine_dir=Path("in-memory"), tokens_per_block=16,
                              max_batch_size=4, max_num_tokens=64, max_input_len=16,
                              max_seq_len=64, ucx_tls=("sm",), kv_transfer_timeout_s=1.0)
        model.setup(config, ReferenceEngine(tiny_model, tokens_per_block=16),
                    model_name=str(role), ucx=ucx, faults=faults)
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
      "prompt of 0 tokens"),
     (Role.AGGREGATED, request(input_lengths=np.array([9], dtype=np.int32)),
      "input_lengths 9 is outside 0..4"),
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
    model, triton = engine_model(role, ucx=FakeKVNode() if role is not Role.AGGREGATED else None)
    model.execute([req])
    assert ended_once(req, error=error) and len(req.responses) == 1
    ok = request(request_id="ok")
    model.execute([ok])
    assert ended_once(ok) and len(ok.tokens) == 4
    assert triton.metrics["pdtrt_engine_active_sequences"] == 0


# -- one final response ------------------------------------------------------------------------
def test_a_streaming_request_gets_its_tokens_then_one_final(engine_model):
    model, triton = engine_model()
    req = request(max_new=6)
    model.execute([req])
    assert ended_once(req) and len(req.tokens) == 6
    assert [len(r.tokens) for r in req.responses] == [1] * 6  # one token a response
    assert all("first_token_time_ns" in r.outputs for r in req.responses)
    assert triton.metrics["pdtrt_engine_requests_total"] == 1


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


def test_a_stop_frees_the_kv_a_prefill_holds(engine_model):
    ucx = FakeKVNode()
    model, triton = engine_model(Role.PREFILL, ucx=ucx)
    ctx = request(request_type=RequestType.CONTEXT_ONLY, request_id="held-1", streaming=False)
    model.execute([ctx])
    assert ended_once(ctx) and "context_phase_params" in ctx.responses[0].outputs
    assert list(ucx.stats.held) == [1] and triton.metrics["pdtrt_kv_held_buffers"] == 1
    halt = stop("held-1")
    model.execute([halt])
    assert ended_once(halt) and ucx.released == [1] and not ucx.stats.held
    assert triton.metrics["pdtrt_kv_released_total"] == 1
    assert triton.metrics["pdtrt_kv_held_buffers"] == 0


def test_prefill_then_decode_gives_the_aggregated_tokens(engine_model):
    ucx = FakeKVNode()  # one node: the decode pulls what the prefill offered
    prefill, _ = engine_model(Role.PREFILL, ucx=ucx)
    decode, triton = engine_model(Role.DECODE, ucx=ucx)
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
    again = request(max_new=6, request_type=RequestType.GENERATION_ONLY,
                    context_phase_params=params, request_id="again")
    decode.execute([again])  # the KV has been pulled: gone
    assert ended_once(again, error="KV transfer failed: the prefill instance no longer holds")


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


def test_an_engine_failure_before_data_is_one_error_response(engine_model):
    model, _ = engine_model(faults=FaultInjection(("fault-",)))
    req = request(max_new=8, request_id="fault-2", streaming=False)
    model.execute([req])
    assert ended_once(req, error="engine failure: injected decode-step fault")
    assert len(req.responses) == 1 and req.responses[0].final
