"""TensorRT-LLM's LLM API as pdtrt uses it: the pinned surface as data (:mod:`.surface`) and a CPU
implementation of exactly that surface (:mod:`.reference`).

pdtrt's LLM-API engine model (:mod:`pdtrt.runtime.llm_engine_model`) asks :func:`load_llm_api`
for ``LLM`` / ``SamplingParams`` / ``DisaggregatedParams``: ``tensorrt_llm``'s on a GPU, the
reference on the CPU; nothing else differs between the two.
"""

from pdtrt.llmapi.surface import LLMApi, LLMApiImpl, load_llm_api, load_surface

__all__ = ["LLMApi", "LLMApiImpl", "load_llm_api", "load_surface"]
