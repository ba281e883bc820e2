"""Stand-in preprocessing: every prompt becomes the ids [5, 6, 7]."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            num = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
            words = np.full((1, 2, 1), -1, dtype=np.int32)  # [B, 2, 1]: no bad / stop words
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("INPUT_ID", np.array([[5, 6, 7]], dtype=np.int32)),
                pb_utils.Tensor("REQUEST_INPUT_LEN", np.array([[3]], dtype=np.int32)),
                pb_utils.Tensor("BAD_WORDS_IDS", words),
                pb_utils.Tensor("STOP_WORDS_IDS", words),
                pb_utils.Tensor("REQUEST_OUTPUT_LEN", num.astype(np.int32)),
                pb_utils.Tensor("OUT_END_ID", np.array([[0]], dtype=np.int32)),
                pb_utils.Tensor("OUT_PAD_ID", np.array([[0]], dtype=np.int32)),
            ]))
        return responses
