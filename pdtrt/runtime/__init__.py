"""Code that runs inside Triton's Python backend (and standalone, for tests).

- :mod:`reference_engine` -- the reference engine: a Llama-family PyTorch model with separate
  ``prefill()`` and batched ``decode_step()``;
- :mod:`scheduler` -- in-flight batching of the sequences one engine instance holds;
- :mod:`phase_params` -- the opaque ``context_phase_params`` hand-off;
- :mod:`kv_transfer` -- moving a request's KV cache between instances over UCX (ucxx);
- :mod:`triton_io` -- the one seam into Triton's Python backend (``pb_utils``), injected;
- :mod:`requests` -- router and engine requests, parsed once at the edge;
- :mod:`phase_client` -- how the router reaches a phase model (BLS or gRPC);
- ``*_model`` -- the ``TritonPythonModel`` classes the generated ``model.py`` shims subclass.
"""
