"""The LLM API a stub actually runs on, held to what pdtrt's engine model needs of it.

The engine model was written against one release (:data:`PINNED_VERSION`, the TensorRT-LLM in
NGC ``tritonserver:26.07-trtllm-python-py3``); a container may hold another. Upstream's
``DisaggregatedParams`` and ``SamplingParams`` are keyword-only dataclasses and ``LlmArgs``
forbids unknown keys, so a keyword a release lacks is a ``TypeError`` or ``ValidationError`` on
every request or at load -- e.g. ``DisaggregatedParams.first_gen_log_probs``, which came to main
with TensorRT-LLM PR #11727 (2026-02-25) after release/1.2 was cut. :func:`check_llm_api`
reads the installed classes' fields and the options' keys once, at load:

- a field pdtrt needs (:data:`NEEDED`) that the library lacks refuses the load, naming the
  class, the field and the version (:class:`~pdtrt.errors.LLMApiMismatchError`);
- a field pdtrt uses only where it exists (:data:`OPTIONAL`) is passed only then
  (:meth:`ApiSurface.has`); its absence is logged once;
- an options key the library's ``LlmArgs`` does not have refuses the load the same way.

Nothing here imports ``tensorrt_llm`` or YAML: the stub has loaded the library already, and the
pinned surface (``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``) is the contract tests' business;
a contract test keeps :data:`NEEDED` and :data:`OPTIONAL` inside it.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdtrt.errors import LLMApiMismatchError

__all__ = ["NEEDED", "OPTIONAL", "PINNED_VERSION", "ApiSurface", "check_llm_api",
           "class_fields"]

PINNED_VERSION = "1.2.1"

# The fields the engine model sets (pdtrt.runtime.engine.model, pdtrt.runtime.phase_params):
# a release without one cannot serve pdtrt's requests.
NEEDED: Mapping[str, tuple[str, ...]] = {
    "SamplingParams": ("end_id", "max_tokens", "top_k", "top_p", "temperature", "seed",
                       "min_tokens", "repetition_penalty", "presence_penalty",
                       "frequency_penalty", "logprobs", "stop", "stop_token_ids", "bad",
                       "bad_token_ids", "include_stop_str_in_output"),
    "DisaggregatedParams": ("request_type", "first_gen_tokens", "ctx_request_id",
                            "opaque_state", "draft_tokens"),
}
# Fields used only where the library has them: passed when present and set, else left out.
OPTIONAL: Mapping[str, tuple[str, ...]] = {
    # the first token's log-probability for a generation-only request (PR #11727, 1.3 line);
    # without it the engine model reports the prefill's value itself (context_phase_params)
    "DisaggregatedParams": ("first_gen_log_probs",),
}


@dataclass(frozen=True, kw_only=True)
class ApiSurface:
    """What the installed LLM API has, as far as pdtrt asks."""

    impl: str
    version: str
    fields: Mapping[str, frozenset[str]]  # class name -> its fields
    missing_optional: tuple[str, ...] = ()  # "Class.field" of OPTIONAL fields absent

    def has(self, cls: str, name: str) -> bool:
        return name in self.fields.get(cls, frozenset())

    def notes(self) -> list[str]:
        """The differences worth a log line (none when the release is the pinned one)."""
        out = []
        if not self.version.startswith(PINNED_VERSION):
            out.append(f"{self.impl} {self.version}; pdtrt is pinned to {PINNED_VERSION}")
        if self.missing_optional:
            out.append(f"not in {self.impl} {self.version}, left out of every request: "
                       + ", ".join(self.missing_optional))
        return out


def class_fields(cls: Any) -> frozenset[str]:
    """The keyword fields of a dataclass, a pydantic model or a plain constructor (through
    any wrapper that names what it wraps, ``__wrapped__``)."""
    cls = inspect.unwrap(cls)
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls) if f.init)
    model_fields = getattr(cls, "model_fields", None)
    if isinstance(model_fields, Mapping):
        return frozenset(model_fields)
    params = inspect.signature(cls).parameters.values()
    return frozenset(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                          p.KEYWORD_ONLY))


def check_llm_api(api: Any, options: Mapping[str, Any] | None = None) -> ApiSurface:
    """The surface of ``api`` (a :class:`pdtrt.llmapi.LLMApi`); raises
    :class:`~pdtrt.errors.LLMApiMismatchError` naming every needed field and every options
    key (dotted) the library lacks."""
    fields = {name: class_fields(getattr(api, name)) for name in NEEDED}
    version = getattr(api, "version", "") or "unknown version"
    impl = str(getattr(api, "impl", "LLM API"))
    problems = [f"{cls}.{f}" for cls, names in NEEDED.items() for f in names
                if f not in fields[cls]]
    llm_args = getattr(api, "LlmArgs", None)
    if options and llm_args is not None:
        # the LLM's own parameters (tensor_parallel_size, dtype, ...) are options too
        named = class_fields(api.LLM) if getattr(api, "LLM", None) is not None else frozenset()
        problems += [f"LLM-API option {key}" for key in _unknown_options(llm_args, options)
                     if key not in named]
    if problems:
        raise LLMApiMismatchError(
            f"{impl} {version} lacks what pdtrt's engine model needs: {', '.join(problems)}",
            hint=f"run the TensorRT-LLM release pdtrt is pinned to ({PINNED_VERSION}, NGC "
            "tritonserver 26.07-trtllm-python-py3), or regenerate the options with a pdtrt "
            "that supports this release (`pdtrt doctor` shows the check)")
    missing = tuple(f"{cls}.{f}" for cls, names in OPTIONAL.items() for f in names
                    if f not in fields[cls])
    return ApiSurface(impl=impl, version=version, fields=fields, missing_optional=missing)


def _unknown_options(model: Any, options: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of ``options`` that the pydantic model ``model`` (and the models its fields
    hold) has no field for."""
    fields = getattr(model, "model_fields", None)
    if not isinstance(fields, Mapping):
        return []
    out = []
    for key, value in options.items():
        if key not in fields:
            out.append(prefix + key)
        elif isinstance(value, Mapping) and (inner := _nested_model(fields[key].annotation)):
            out += _unknown_options(inner, value, f"{prefix}{key}.")
    return out


def _nested_model(annotation: Any) -> Any:
    """The pydantic model an annotation holds (``Model``, ``Model | None``, ``Optional``)."""
    if isinstance(annotation, type) and isinstance(getattr(annotation, "model_fields", None),
                                                   Mapping):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if (found := _nested_model(arg)) is not None:
                return found
    return None
