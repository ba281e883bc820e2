"""TEST FIXTURE, not an LLM: a decoupled model with the NVIDIA ensemble I/O.

For ``text_input`` it produces ``max_tokens`` deterministic word tokens ``w<i>_<seed>`` (one
per streamed response when ``stream`` is true, all joined in one response otherwise), sleeping
``token_delay_ms`` per token. An empty prompt is a request error. ``async def execute`` lets
one instance serve many streams at once, like an in-flight-batching engine.
"""

import asyncio
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"]).get("parameters", {})
        self.delay_s = float(params.get("token_delay_ms", {}).get("string_value", "2")) / 1000

    async def execute(self, requests):
        await asyncio.gather(*(self._serve(r) for r in requests))
        return None

    async def _serve(self, request):
        sender = request.get_response_sender()
        prompt = _scalar(request, "text_input", b"")
        prompt = prompt.decode() if isinstance(prompt, bytes) else str(prompt)
        max_tokens = int(_scalar(request, "max_tokens", 16))
        stream = bool(_scalar(request, "stream", False))
        seed = int(_scalar(request, "random_seed", 0))
        if not prompt.strip():
            sender.send(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("fake_llm: text_input is empty")),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        words = []
        for i in range(max_tokens):
            if request.is_cancelled():
                break
            await asyncio.sleep(self.delay_s)
            word = f" w{i}_{seed}"
            words.append(word)
            if stream:
                out = pb_utils.Tensor("text_output", np.array([word.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        if not stream:
            out = pb_utils.Tensor("text_output",
                                  np.array(["".join(words).encode()], dtype=np.object_))
            sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
