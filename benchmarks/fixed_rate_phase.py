# router_capacity.py: a phase model that costs nothing but its tokens. Raw pb_utils on purpose
# (no pdtrt import): the prefill answers a context-only request at once with one token and a
# dummy hand-off; the decode streams request_output_len tokens, the first one again, at a fixed
# rate per stream (parameter bench_tokens_per_s), answering as TensorRT-LLM's stream_interval N
# does (parameter bench_stream_interval, default 1): the first token alone, then the tokens of
# every N-th iteration together, and the last; a stop request gets an empty final response.
# Tokens cost only the Triton responses, so whatever limits tokens/s is the router in front.
import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
FIRST = 7
HAND_OFF = np.frombuffer(b'{"stand-in": "no KV"}', dtype=np.uint8).reshape(1, -1)


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _tokens(*ids):
    return pb_utils.Tensor("output_ids", np.array(ids, dtype=np.int32).reshape(1, 1, -1))


class TritonPythonModel:
    def initialize(self, args):
        params = {k: v["string_value"]
                  for k, v in json.loads(args["model_config"]).get("parameters", {}).items()}
        self.role = params["pdtrt_role"]
        self.interval_s = 1.0 / float(params.get("bench_tokens_per_s", "50"))
        self.stream_interval = int(params.get("bench_stream_interval", "1"))

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(r) for r in requests))

    async def _serve(self, request):
        sender = request.get_response_sender()
        if bool(_scalar(request, "stop", False)):
            sender.send(flags=FINAL)
            return
        n = int(_scalar(request, "request_output_len", 1))
        if self.role == "prefill":
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                _tokens(FIRST), pb_utils.Tensor("context_phase_params", HAND_OFF)]), flags=FINAL)
            return
        held = []
        for k in range(1, n + 1):  # k: the request's iteration
            await asyncio.sleep(self.interval_s)
            held.append(FIRST + k - 1)
            if k == 1 or k % self.stream_interval == 0 or k == n:
                sender.send(pb_utils.InferenceResponse(output_tensors=[_tokens(*held)]),
                            flags=FINAL if k == n else 0)
                held = []
