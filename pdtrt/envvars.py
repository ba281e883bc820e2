"""Every environment variable pdtrt reads, in one place.

pdtrt reads:
- ``PDTRT_DEBUG`` -- ``1`` makes the CLI show tracebacks of expected errors (same as ``--debug``).
- ``PDTRT_TRTLLM_EXAMPLES`` -- where ``pdtrt build`` finds TensorRT-LLM's ``examples/`` tree
  (``convert_checkpoint.py``, ``quantize.py``); default: the target's ``examples_dir``.
- ``CUDA_VERSION`` -- set by NGC containers; recorded in engine manifests by ``pdtrt build``.

Later stages will *write* UCX / TensorRT-LLM variables for the processes they start
(``UCX_TLS``, ``UCX_NET_DEVICES``, ``TRTLLM_USE_UCX_KVCACHE``, ...); they are listed here too.
"""

from __future__ import annotations

PDTRT_DEBUG = "PDTRT_DEBUG"
PDTRT_TRTLLM_EXAMPLES = "PDTRT_TRTLLM_EXAMPLES"
CUDA_VERSION = "CUDA_VERSION"

READ = (PDTRT_DEBUG, PDTRT_TRTLLM_EXAMPLES, CUDA_VERSION)
