"""The gRPC stream client shared by the router, the front and the supervisor."""

from __future__ import annotations

import numpy as np
from tritonclient.utils import deserialize_bytes_tensor

from pdtrt.client.streams import GrpcStreamClient
from pdtrt.runtime.router.kv_index import kv_events_inputs


def test_a_grpc_stream_request_carries_string_inputs_as_triton_reads_them():
    inputs = kv_events_inputs("9f2c:41,77aa:3")
    req = GrpcStreamClient.request("prefill", inputs, request_id="x", parameters={},
                                   outputs=["kv_events"])
    raw = dict(zip((i.name for i in req.inputs), req.raw_input_contents, strict=True))
    assert deserialize_bytes_tensor(raw["kv_events_cursor"]).tolist() == [b"9f2c:41,77aa:3"]
    assert np.frombuffer(raw["input_ids"], dtype=np.int32).tolist() == [1]


def test_a_response_reads_as_tritonclients_infer_result_reads_it():
    """The stream client reads fixed-size outputs itself (every relayed token) and leaves the
    rest to tritonclient: every output must come out as ``InferResult.as_numpy`` gives it."""
    from tritonclient.grpc import InferResult, service_pb2
    from tritonclient.utils import np_to_triton_dtype, serialize_byte_tensor, triton_to_np_dtype

    from pdtrt.client.streams import FIXED_SIZE_DTYPES, _outputs

    arrays = {"output_ids": np.array([[[7, 8]]], np.int32),
              "context_phase_params": np.frombuffer(b"abc", np.uint8).reshape(1, -1),
              "output_log_probs": np.array([[[0.5, -1.0]]], np.float32),
              "arrival_time_ns": np.array([[1 << 40]], np.int64), "stop": np.array([[True]]),
              "pdtrt_error": np.array([[b"boom"]], dtype=object),
              "none_yet": np.zeros((1, 0), np.int32)}
    response = service_pb2.ModelInferResponse()
    for name, value in arrays.items():
        response.outputs.add(name=name, datatype=np_to_triton_dtype(value.dtype),
                             shape=list(value.shape))
        response.raw_output_contents.append(serialize_byte_tensor(value).item()
                                            if value.dtype == np.object_ else value.tobytes())
    got, want = _outputs(response, InferResult), InferResult(response)
    for datatype, dtype in FIXED_SIZE_DTYPES.items():
        assert np.dtype(triton_to_np_dtype(datatype)) == dtype, datatype
    assert list(got) == list(arrays)
    for name in arrays:
        expected = want.as_numpy(name)
        assert got[name].dtype == expected.dtype and got[name].shape == expected.shape, name
        assert np.array_equal(got[name], expected), name
