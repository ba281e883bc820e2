"""See config.pbtxt: streams ticks and logs whether it saw its request cancelled."""

import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _log(line):
    with open(os.environ["PDTRT_FACTS_LOG"], "a") as f:
        f.write(line + "\n")


def _tick(i):
    return pb_utils.InferenceResponse([pb_utils.Tensor("TICK", np.array([i], np.int32))])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._run, args=(request,), daemon=True).start()
        return None

    def _run(self, request):
        sender = request.get_response_sender()
        rid = request.request_id()
        if rid == "error-after-data":
            sender.send(_tick(0))
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("boom")))
            sender.send(flags=FINAL)
            return
        n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
        for i in range(n):
            if request.is_cancelled():
                _log(f"{rid} cancelled")
                sender.send(flags=FINAL)
                return
            sender.send(_tick(i))
            time.sleep(0.1)
        _log(f"{rid} completed")
        sender.send(flags=FINAL)
