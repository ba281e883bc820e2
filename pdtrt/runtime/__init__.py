"""Code that runs inside Triton's Python backend (and standalone, for tests).

- :mod:`reference_engine` -- the reference engine: a Llama-family PyTorch model with separate
  ``prefill()`` and batched ``decode_step()``;
- :mod:`scheduler` -- in-flight batching of the sequences one engine instance holds;
- :mod:`phase_params` -- the opaque ``context_phase_params`` hand-off;
- :mod:`kv_transfer` -- moving a request's KV cache between instances over UCX (ucxx);
- ``*_model`` -- thin ``TritonPythonModel`` classes the generated ``model.py`` shims import.
"""
