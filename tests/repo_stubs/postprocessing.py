"""Stand-in postprocessing: the token ids as text."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()
            text = " ".join(str(t) for t in tokens.reshape(-1))
            out = pb_utils.Tensor("OUTPUT", np.array([[text]], dtype=object))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
