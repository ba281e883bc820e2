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
