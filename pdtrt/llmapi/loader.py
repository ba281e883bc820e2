"""The choice between TensorRT-LLM's LLM API and pdtrt's CPU reference of it.

:func:`load_llm_api` returns the three classes the engine model constructs (``LLM``,
``SamplingParams``, ``DisaggregatedParams``) from ``tensorrt_llm`` when it is importable (a GPU
container) and from :mod:`pdtrt.llmapi.reference` otherwise, or as :class:`LLMApiImpl` says.
Nothing is imported until it is asked for: the engine model's stub loads one of the two.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["LLMApi", "LLMApiImpl", "load_llm_api"]


class LLMApiImpl(StrEnum):
    AUTO = "auto"  # tensorrt_llm when importable, else the reference
    TENSORRT_LLM = "tensorrt_llm"
    REFERENCE = "reference"


@dataclass(frozen=True, kw_only=True)
class LLMApi:
    impl: LLMApiImpl  # TENSORRT_LLM or REFERENCE
    LLM: Any
    SamplingParams: Any
    DisaggregatedParams: Any
    LlmArgs: Any = None  # the options' pydantic model (TorchLlmArgs); None: not checked
    version: str = ""  # tensorrt_llm.__version__, or the release the reference stands for

    @property
    def is_reference(self) -> bool:
        return self.impl is LLMApiImpl.REFERENCE


def load_llm_api(impl: LLMApiImpl = LLMApiImpl.AUTO) -> LLMApi:
    """The LLM-API classes; ``ImportError`` when ``tensorrt_llm`` is asked for and absent."""
    if impl is LLMApiImpl.AUTO:
        found = importlib.util.find_spec("tensorrt_llm") is not None
        impl = LLMApiImpl.TENSORRT_LLM if found else LLMApiImpl.REFERENCE
    if impl is LLMApiImpl.TENSORRT_LLM:
        module = importlib.import_module("tensorrt_llm.llmapi")
        # the PyTorch flow's options model (tensorrt_llm/llmapi/llm_args.py); re-exported by
        # tensorrt_llm.llmapi in the 1.x line, looked up where it is defined otherwise
        llm_args = getattr(module, "TorchLlmArgs", None) or getattr(
            importlib.import_module("tensorrt_llm.llmapi.llm_args"), "TorchLlmArgs", None)
        version = str(getattr(importlib.import_module("tensorrt_llm"), "__version__", ""))
    else:
        module = importlib.import_module("pdtrt.llmapi.reference")
        llm_args, version = module.ReferenceLlmArgs, module.__version__
    return LLMApi(impl=impl, LLM=module.LLM, SamplingParams=module.SamplingParams,
                  DisaggregatedParams=module.DisaggregatedParams, LlmArgs=llm_args,
                  version=version)
