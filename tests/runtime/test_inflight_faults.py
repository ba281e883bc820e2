"""The stop bookkeeping, fault injection and the gRPC phase request, without a server."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.runtime.engine.inflight import InflightRequests
from pdtrt.runtime.faults import (
    KV_DROP_DONE,
    KV_KILL,
    FaultInjection,
    InjectedFault,
    KVTransferFaults,
    once_per_server,
)


def test_stop_marks_live_sequences_of_that_id_only():
    reg = InflightRequests()
    a, b, other = reg.register("r1"), reg.register("r1"), reg.register("r2")
    result = reg.stop("r1", now_s=0.0)
    assert result.sequences == 2 and result.held == 0
    assert a.stopped and b.stopped and not other.stopped
    reg.finished(a)
    reg.finished(b)
    assert reg.num_live == 1 and reg.stop("r1", now_s=0.0).sequences == 0


def test_held_kv_is_counted_until_its_timeout_and_a_stop_frees_none():
    """TensorRT-LLM 1.2 frees a finished context-only request's KV only when
    kv_transfer_timeout_ms runs out: a stop reports the hand-off but it stays counted."""
    reg = InflightRequests()
    reg.offered("a", until_s=10.0)
    reg.offered("b", until_s=12.0)
    reg.offered("c", until_s=float("inf"))  # no timeout configured: held until pulled
    assert reg.num_held(now_s=5.0) == 3
    assert reg.stop("a", now_s=5.0).held == 1
    assert reg.num_held(now_s=5.0) == 3  # the stop freed nothing
    assert reg.num_held(now_s=10.0) == 2 and reg.stop("a", now_s=10.0).held == 0
    assert reg.num_held(now_s=1e9) == 1


def test_fault_rules_are_per_role_and_malformed_ones_are_refused():
    env = {"PDTRT_FAULT_INJECTION": "decode_step:decode:fault-,decode_step:prefill:p-"}
    decode = FaultInjection.from_env("decode", env)
    assert decode is not None and decode.prefixes == ("fault-",)
    assert FaultInjection.from_env("aggregated", env) is None
    assert FaultInjection.from_env("decode", {}) is None
    decode.before_decode(["ok-1", "healthy"])
    with pytest.raises(InjectedFault, match="fault-7"):
        decode.before_decode(["ok-1", "fault-7~ab"])
    both = {"PDTRT_FAULT_INJECTION": "decode_step:router:x-,event_loop:router:wedge-"}
    loop = FaultInjection.from_env("router", both, point="event_loop")
    assert loop is not None and loop.hits("wedge-1") and not loop.hits("x-1")
    assert FaultInjection.from_env("decode", both, point="event_loop") is None
    with pytest.raises(ValueError, match="decode_step:<role>:<request-id prefix>"):
        FaultInjection.from_env("decode", {"PDTRT_FAULT_INJECTION": "explode:decode:x"})


def test_kv_transfer_faults_name_a_role_or_a_model_and_fire_once(tmp_path, monkeypatch):
    env = {"PDTRT_FAULT_INJECTION": "kv_transfer:prefill_b:kill-,kv_done:prefill:drop-"}
    claimed: set[str] = set()

    def claim(fault: str) -> bool:
        first = fault not in claimed
        claimed.add(fault)
        return first

    other = KVTransferFaults.from_env("prefill", "prefill", env)
    assert other is not None and other.kill is None  # kv_transfer names prefill_b only
    faults = KVTransferFaults.from_env("prefill", "prefill_b", env)
    assert faults is not None
    faults.claim = claim
    assert faults.kv_transfer_fault("ok-1") is None
    assert faults.kv_transfer_fault("drop-1~ab") == KV_DROP_DONE
    assert faults.kv_transfer_fault("drop-1~cd") is None  # once: the retry is served
    assert faults.kv_transfer_fault("kill-2") == KV_KILL
    assert KVTransferFaults.from_env("decode", "decode", env) is None
    # once per server: a marker named by the server (the stub's parent) in the temp dir
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert once_per_server("drop_done") and not once_per_server("drop_done")
    assert once_per_server("kill")


def test_a_dropped_kv_completion_leaves_the_kv_held_until_its_timeout():
    """The prefill side of a lost "done": the pull is answered, the KV is never sent and
    stays held (the sweep frees it at hold_s); a transfer without a fault is served."""
    import asyncio

    from pdtrt.llmapi.reference.kv_transfer import UcxKVNode

    node = UcxKVNode(hold_s=60)
    node.before_serve = lambda tid: tid != dropped
    sent: list[int] = []

    class Endpoint:
        async def send(self, buffer, tag, force_tag):
            sent.append(tag)

    async def endpoint(_address):
        return Endpoint()

    node._endpoint = endpoint
    dropped = node.offer(np.zeros(8, dtype=np.uint8))
    served = node.offer(np.zeros(8, dtype=np.uint8))
    for tid, tag in ((dropped, 10), (served, 20)):
        message = np.zeros(64, dtype=np.uint8)
        message[:20] = np.frombuffer(np.array([tid, tag], dtype="<u8").tobytes()
                                     + np.array([0], dtype="<u4").tobytes(), dtype=np.uint8)
        asyncio.run(node._answer(message))
    assert sent == [10, 20, 21]  # status only for the dropped one; status + KV for the other
    assert node.is_held(dropped) and not node.is_held(served)


def test_an_engine_failure_fails_the_batch_and_the_waiting_requests_still_run(tiny_model):
    import queue

    from pdtrt.engine_io import RequestType
    from pdtrt.llmapi.reference.engine import ReferenceEngine, SequenceSampling
    from pdtrt.llmapi.reference.scheduler import Scheduler, SeqRequest

    sched = Scheduler(ReferenceEngine(tiny_model, tokens_per_block=16), max_batch_size=1,
                      max_num_tokens=64, faults=FaultInjection(("fault-",)))
    outs = {rid: queue.Queue() for rid in ("fault-1", "ok-1")}
    for rid, out in outs.items():  # both queued before the loop starts: one batch of one
        sched.submit(SeqRequest(request_id=rid, prompt=[5, 6, 7], max_new_tokens=4, end_id=None,
                                sampling=SequenceSampling(),
                                mode=RequestType.CONTEXT_AND_GENERATION,
                                emit=out.put))
    sched.start()
    try:
        def final(out):
            while True:
                em = out.get(timeout=60)
                if em.final:
                    return em
        assert "engine failure: injected decode-step fault" in final(outs["fault-1"]).error
        ok = final(outs["ok-1"])
        assert ok.error is None
    finally:
        sched.stop()


def test_grpc_phase_request_carries_inputs_parameters_and_the_empty_final_flag():
    from tritonclient.grpc import service_pb2  # noqa: F401  (the protobuf types used)

    from pdtrt.client.streams import GrpcStreamClient, StreamResponse

    req = GrpcStreamClient.request(
        "decode", {"input_ids": np.array([[1, 2, 3]], dtype=np.int32),
                   "streaming": np.array([[True]])},
        request_id="c1~ab", parameters={"request_type": "generation_only"},
        outputs=["output_ids", "pdtrt_error"])
    assert req.model_name == "decode" and req.id == "c1~ab"
    assert [(i.name, i.datatype, list(i.shape)) for i in req.inputs] == [
        ("input_ids", "INT32", [1, 3]), ("streaming", "BOOL", [1, 1])]
    assert np.frombuffer(req.raw_input_contents[0], dtype=np.int32).tolist() == [1, 2, 3]
    assert req.parameters["request_type"].string_param == "generation_only"
    assert req.parameters["triton_enable_empty_final_response"].bool_param
    assert [o.name for o in req.outputs] == ["output_ids", "pdtrt_error"]
    err = StreamResponse.of({"pdtrt_error": np.array([[b"engine failure: x"]], dtype=object)},
                           "pdtrt_error")
    assert err.error == "engine failure: x" and err.outputs == {}
    assert StreamResponse.of({"output_ids": np.zeros(1)}, "pdtrt_error").error is None
