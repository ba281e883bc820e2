"""Every environment variable pdtrt reads, in one place.

pdtrt reads:
- ``PDTRT_DEBUG`` -- ``1`` makes the CLI show tracebacks of expected errors (same as ``--debug``).

Later stages will *write* UCX / TensorRT-LLM variables for the processes they start
(``UCX_TLS``, ``UCX_NET_DEVICES``, ``TRTLLM_USE_UCX_KVCACHE``, ...); they are listed here too.
"""

from __future__ import annotations

PDTRT_DEBUG = "PDTRT_DEBUG"

READ = (PDTRT_DEBUG,)
