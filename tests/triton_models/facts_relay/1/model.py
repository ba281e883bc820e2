"""See config.pbtxt: relays facts_stream over BLS; an error response it sees becomes TICK -1."""

import threading

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._run, args=(request,), daemon=True).start()
        return None

    def _run(self, request):
        sender = request.get_response_sender()
        inner = pb_utils.InferenceRequest(
            model_name="facts_stream", inputs=[pb_utils.get_input_tensor_by_name(request, "N")],
            requested_output_names=["TICK"], request_id=request.request_id())
        for response in inner.exec(decoupled=True):
            if response.has_error():
                sender.send(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("TICK", np.array([-1], np.int32))]))
                continue
            tick = pb_utils.get_output_tensor_by_name(response, "TICK")
            if tick is not None:
                sender.send(pb_utils.InferenceResponse([tick]))
        sender.send(flags=FINAL)
