# relay_floor.py: the least a router in Triton's Python backend can do per relayed token, as a
# floor to hold pdtrt's router against. Raw pb_utils and raw grpc.aio on purpose (no pdtrt, and
# of tritonclient only its protobuf messages): each request opens one ModelStreamInfer call to
# the decode stand-in at parameter relay_url / relay_model, reads its int32 output_ids straight
# from the response bytes and sends each response on to the client as it comes -- no routing,
# retries, liveness deadline, cancel checks, metrics or timeline. One gRPC read and one send per
# token (and a sequence_length tensor beside output_ids when relay_sequence_length is "1").
import asyncio
import json

import grpc
import numpy as np
import triton_python_backend_utils as pb_utils
from tritonclient.grpc import service_pb2, service_pb2_grpc

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"]
                  for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.url, self.model = params["relay_url"], params["relay_model"]
        self.with_length = params.get("relay_sequence_length", "0") == "1"
        self.stub = None

    def _service(self):
        if self.stub is None:  # on the event loop, on first use
            self.stub = service_pb2_grpc.GRPCInferenceServiceStub(
                grpc.aio.insecure_channel(self.url))
        return self.stub

    async def execute(self, requests):
        await asyncio.gather(*(self._relay(r) for r in requests))

    async def _relay(self, request):
        sender = request.get_response_sender()
        req = service_pb2.ModelInferRequest(model_name=self.model)
        for name in ("input_ids", "input_lengths", "request_output_len"):
            value = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(1, -1)
            req.inputs.add(name=name, datatype="INT32", shape=list(value.shape))
            req.raw_input_contents.append(value.astype(np.int32).tobytes())
        req.outputs.add(name="output_ids")
        req.parameters["triton_enable_empty_final_response"].bool_param = True
        done = asyncio.Event()

        async def requests():
            yield req
            await done.wait()  # then half-close: the server ends the stream

        try:
            async for response in self._service().ModelStreamInfer(requests()):
                if response.error_message:
                    raise RuntimeError(response.error_message)
                infer = response.infer_response
                if infer.raw_output_contents:
                    ids = np.frombuffer(infer.raw_output_contents[0],
                                        dtype=np.int32).reshape(1, -1)
                    tensors = [pb_utils.Tensor("output_ids", ids)]
                    if self.with_length:  # as the ensemble's contract has it
                        tensors.append(pb_utils.Tensor(
                            "sequence_length", np.array([[ids.shape[-1]]], dtype=np.int32)))
                    sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
                if infer.parameters["triton_final_response"].bool_param:
                    done.set()
        except Exception as exc:  # the client gets an error, never a stream that does not end
            done.set()
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))),
                        flags=FINAL)
            return
        sender.send(flags=FINAL)
