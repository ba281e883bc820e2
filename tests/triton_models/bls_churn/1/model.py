"""See config.pbtxt. Each request runs STREAMS threads at once; each makes one decoupled BLS
call to echo_stream with LEN values, reads it to its end and drops the response iterator at
once (the router's pattern). MODE 1 goes through pdtrt's seam (``BackendTriton``), MODE 0
calls ``pb_utils`` directly. The one response says how many streams ended with LEN responses.

A tripwire makes a Python object freed without the GIL fail at once instead of corrupting the
heap now and then: every output array of a BLS response (the stub creates one per output
tensor, ``PbTensor``'s shared-memory constructor, python_backend r24.10 ``src/pb_tensor.cc``)
gets a weakref callback, i.e. Python code that runs when the array is freed. Freed on a
thread without the GIL, that code cannot run and the stub dies (SIGSEGV)."""

import threading
import weakref

import numpy as np
import triton_python_backend_utils as pb_utils

from pdtrt.runtime.triton_io import BackendTriton

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
_WIRES = {}  # id -> weakref (a weakref must outlive its object for its callback to run)


def _tripped(ref):
    _WIRES.pop(id(ref), None)


def _wired(tensor):
    if tensor is not None:
        ref = weakref.ref(tensor.as_numpy(), _tripped)
        _WIRES[id(ref)] = ref
    return tensor


class _WiredPbUtils:
    """``pb_utils`` with every BLS output array wired (what the seam reads them with)."""

    def __getattr__(self, name):
        return getattr(pb_utils, name)

    @staticmethod
    def get_output_tensor_by_name(response, name):
        return _wired(pb_utils.get_output_tensor_by_name(response, name))


class TritonPythonModel:
    def initialize(self, args):
        self.triton = BackendTriton(_WiredPbUtils())
        self._lock = threading.Lock()  # MODE 0: one pb_utils call at a time, as the seam does

    def execute(self, requests):
        for request in requests:
            threading.Thread(target=self._run, args=(request,), daemon=True).start()
        return None

    def finalize(self):
        self.triton.release()

    def _run(self, request):
        incoming = self.triton.receive([request], ("STREAMS", "LEN", "MODE"), decoupled=True)[0]
        streams, length, mode = (int(incoming.scalar(n)) for n in ("STREAMS", "LEN", "MODE"))
        stream = self._seam_stream if mode == 1 else self._raw_stream
        done = []
        threads = [threading.Thread(target=lambda: done.append(stream(length)))
                   for _ in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.triton.is_cancelled(incoming)  # the router asks this between phases
        self.triton.send(incoming, {"DONE": np.array([sum(done)], np.int32)}, final=True)

    def _seam_stream(self, length):
        responses = self.triton.bls_exec(
            "echo_stream", {"IN": np.arange(length, dtype=np.int32)}, request_id="",
            parameters={}, outputs=["OUT"])
        seen = 0
        while (got := self.triton.bls_next(responses, ["OUT"])) is not None:
            seen += "OUT" in got
        del responses
        return int(seen == length)

    def _raw_stream(self, length):
        with self._lock:
            request = pb_utils.InferenceRequest(
                model_name="echo_stream",
                inputs=[pb_utils.Tensor("IN", np.arange(length, dtype=np.int32))],
                requested_output_names=["OUT"])
        responses = request.exec(decoupled=True)
        seen = 0
        for response in responses:
            with self._lock:
                seen += _wired(pb_utils.get_output_tensor_by_name(response, "OUT")) is not None
            del response
        del responses
        return int(seen == length)
