"""A naive disaggregated BLS, for ``router_bench.py`` only -- not part of pdtrt.

What NVIDIA's disaggregated-serving BLS example does, reduced to the hot path: a decoupled
Python model whose ``execute`` is synchronous and serves one request at a time -- a
context-only request to the prefill model (waited for in full), then a generation-only request
to the decode model whose responses are forwarded to the client one by one, then the final
flag. No early first token (the decode stream carries the first token again), no failover, no
cancellation, no liveness deadline. An operator tunes it with ``instance_group.count``: one
stub process per request in flight. ``router_bench.py`` copies this file to
``<repo>/naive_bls_<N>/1/model.py`` next to a copy of the router's ``config.pbtxt``.
"""

import numpy as np
import triton_python_backend_utils as pb_utils

_INPUTS = ("input_ids", "input_lengths", "request_output_len", "end_id", "pad_id",
           "temperature", "runtime_top_k", "runtime_top_p", "random_seed")
_OUTPUTS = ["output_ids", "sequence_length"]


class TritonPythonModel:
    def initialize(self, args):
        import json

        params = json.loads(args["model_config"])["parameters"]
        self.prefill = params["prefill_model"]["string_value"]
        self.decode = params["decode_model"]["string_value"]

    def execute(self, requests):
        for request in requests:
            self._one(request)
        return None

    def _one(self, request):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        # the config's ``reshape: { shape: [ ] }`` drops the scalars' last dim; the engines
        # want it back, as [batch, 1]
        inputs = [pb_utils.Tensor(name, t.as_numpy() if name == "input_ids"
                                  else t.as_numpy().reshape(-1, 1)) for name in _INPUTS
                  if (t := pb_utils.get_input_tensor_by_name(request, name)) is not None]
        flag = [pb_utils.Tensor("exclude_input_in_output", np.array([[True]]))]
        params = None
        for r in pb_utils.InferenceRequest(
                model_name=self.prefill, requested_output_names=_OUTPUTS + [
                    "context_phase_params", "pdtrt_error"],
                inputs=inputs + flag + [pb_utils.Tensor("streaming", np.array([[False]]))],
                parameters={"request_type": "context_only"}).exec(decoupled=True):
            if r.has_error():
                sender.send(pb_utils.InferenceResponse(error=r.error()), flags=final)
                return
            t = pb_utils.get_output_tensor_by_name(r, "context_phase_params")
            if t is not None:
                params = pb_utils.Tensor("context_phase_params", t.as_numpy())
        if params is None:
            sender.send(pb_utils.InferenceResponse(
                error=pb_utils.TritonError("prefill gave no context_phase_params")), flags=final)
            return
        for r in pb_utils.InferenceRequest(
                model_name=self.decode, requested_output_names=_OUTPUTS,
                inputs=inputs + flag + [params, pb_utils.Tensor("streaming", np.array([[True]]))],
                parameters={"request_type": "generation_only"}).exec(decoupled=True):
            if r.has_error():
                sender.send(pb_utils.InferenceResponse(error=r.error()), flags=final)
                return
            tensors = [pb_utils.Tensor(name, t.as_numpy()) for name in _OUTPUTS
                       if (t := pb_utils.get_output_tensor_by_name(r, name)) is not None]
            if tensors:
                sender.send(pb_utils.InferenceResponse(output_tensors=tensors))
        sender.send(flags=final)
