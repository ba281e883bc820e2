"""pdtrt's CPU implementation of exactly the TensorRT-LLM LLM-API surface its engine model uses.

``LLM`` (:mod:`.llm`), ``SamplingParams`` and ``DisaggregatedParams`` (:mod:`.params`), the
``RequestOutput`` / ``CompletionOutput`` that ``generate_async`` returns (:mod:`.outputs`), the
LLM-API options it accepts (:mod:`.options`) and the KV cache transceiver over UCX
(:mod:`.transceiver`), on the CPU engine (:mod:`.engine`: a Llama-family PyTorch model with
separate ``prefill()`` and batched ``decode_step()``), its in-flight scheduler
(:mod:`.scheduler`) and the UCX KV transfer (:mod:`.kv_transfer`).
What it must expose is data: ``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``.
"""

from pdtrt.llmapi.reference.llm import LLM
from pdtrt.llmapi.reference.options import ReferenceLlmArgs
from pdtrt.llmapi.reference.outputs import CompletionOutput, RequestError, RequestOutput
from pdtrt.llmapi.reference.params import DisaggregatedParams, SamplingParams

__all__ = ["LLM", "CompletionOutput", "DisaggregatedParams", "ReferenceLlmArgs", "RequestError",
           "RequestOutput", "SamplingParams", "__version__"]

# The TensorRT-LLM release whose LLM API this twin is (pdtrt.llmapi.check.PINNED_VERSION)
__version__ = "1.2.1"
