"""TensorRT-LLM's LLM API as pdtrt uses it: the choice of implementation (:mod:`.loader`), the
pinned surface as data (:mod:`.surface`) and a CPU implementation of exactly that surface
(:mod:`.reference`).

pdtrt's LLM-API engine model (:mod:`pdtrt.runtime.engine.model`) asks :func:`load_llm_api`
for ``LLM`` / ``SamplingParams`` / ``DisaggregatedParams``: ``tensorrt_llm``'s on a GPU, the
reference on the CPU; nothing else differs between the two.
"""

from pdtrt.llmapi.loader import LLMApi, LLMApiImpl, load_llm_api

__all__ = ["LLMApi", "LLMApiImpl", "load_llm_api"]
