"""Stand-in router / engine model (decoupled): streams tokens 100, 101, ... then the final flag."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            lens = pb_utils.get_input_tensor_by_name(request, "request_output_len").as_numpy()
            for i in range(int(lens.reshape(-1)[0])):  # scalars arrive as [B] (reshape [])
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("output_ids", np.array([[[100 + i]]], dtype=np.int32)),
                    pb_utils.Tensor("sequence_length", np.array([[1]], dtype=np.int32)),
                ]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
