"""Which sampler an engine model's LLM runs, and the request inputs that sampler would ignore.

TensorRT-LLM 1.2's PyTorch flow samples with one of two samplers (LlmArgs ``sampler_type``):
TRTLLMSampler, the C++ decoder, applies every sampling input pdtrt's ensembles take;
TorchSampler -- what ``auto`` picks unless the decoding mode is beam search (upstream's
``instantiate_sampler``, tensorrt_llm/_torch/pyexecutor/_util.py) -- does not. As of 1.2 it
ignores the repetition, presence and frequency penalties (TensorRT-LLM #16485 added them later;
issue #9442) and bad words (#16052), draws every request's tokens from one generator seeded
42 instead of the request's seed (#17172 added per-request seeds), and compares ``min_tokens``
with the prompt's tokens plus the generated ones (#12166), so a ``min_length`` up to the
prompt's length bans nothing.

A request that sets one of those would be served as if it had not, so the engine model refuses
it (:func:`check_sampler`) with the fix: the pool's ``engine.sampler`` TRTLLMSampler
(docs/spec.md, "The sampler"). Two choices, and why:

- a random seed on a *greedy* request is accepted: no token is drawn, so the seed changes
  nothing on either sampler;
- ``min_length`` is refused, not translated to ``prompt length + min_length``: the translation
  would rest on how 1.2 counts a generation-only request's tokens on the decode side and on the
  same check banning the last vocabulary entry for a request without an end id (reported in
  TensorRT-LLM #12358), neither verified on a GPU, and it would silently double the ban once the
  pin moves past #12166. ``min_length`` 0 or 1 asks for nothing beyond the runtime's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pdtrt.engine_io import RequestSampling, Role
from pdtrt.enums import Phase, Sampler
from pdtrt.errors import InvalidRequestError

__all__ = ["check_sampler", "configured_sampler", "ignored_inputs"]


def configured_sampler(options: Mapping[str, Any]) -> Sampler:
    """The sampler an LLM built with these LLM-API ``options`` runs: ``sampler_type``, where
    ``auto`` (and no setting: LlmArgs' default) is TorchSampler unless ``max_beam_width`` > 1.
    Raises ``ValueError`` for a value LlmArgs does not know."""
    kind = options.get("sampler_type") or "auto"
    if kind == "auto":
        return Sampler.TRTLLM if int(options.get("max_beam_width") or 1) > 1 else Sampler.TORCH
    return Sampler(kind)


def _shown(value: float) -> str:
    return str(np.float32(value))  # the inputs are FP32: 1.3, not 1.2999999523162842


def ignored_inputs(sampling: RequestSampling, sampler: Sampler) -> list[str]:
    """What ``sampler`` would silently not do of ``sampling``, one phrase per input (empty:
    it does all of it)."""
    if sampler is Sampler.TRTLLM:
        return []
    s, ignored = sampling, []
    for name, value, neutral in (("repetition_penalty", s.repetition_penalty, 1.0),
                                 ("presence_penalty", s.presence_penalty, 0.0),
                                 ("frequency_penalty", s.frequency_penalty, 0.0)):
        if value != neutral:
            ignored.append(f"ignores input '{name}' ({_shown(value)}; TensorRT-LLM #16485)")
    if s.bad_words:
        ignored.append("ignores input 'bad_words_list' (the ensemble's 'bad_words'; "
                       "TensorRT-LLM #16052)")
    if s.seed is not None and not s.greedy:
        ignored.append(f"ignores input 'random_seed' ({s.seed}) and draws every request's "
                       "tokens from one generator seeded 42 (TensorRT-LLM #17172)")
    if s.min_tokens > 1:
        ignored.append(f"counts the prompt's tokens toward input 'min_length' ({s.min_tokens}), "
                       "so it bans the end id for fewer generated tokens or none "
                       "(TensorRT-LLM #12166)")
    return ignored


def check_sampler(sampling: RequestSampling, options: Mapping[str, Any], role: Role) -> None:
    """Raise :class:`InvalidRequestError` naming each input the sampler of an LLM built with
    ``options`` would ignore, the sampler, and the fix for the pool of ``role``'s model (the
    aggregated model runs on the prefill pool's settings)."""
    sampler = configured_sampler(options)
    ignored = ignored_inputs(sampling, sampler)
    if ignored:
        setting = options.get("sampler_type") or "auto"
        named = str(sampler) if setting == sampler else f"{sampler} (sampler_type {setting})"
        pool = role.phase or Phase.PREFILL
        them = "it" if len(ignored) == 1 else "them"
        raise InvalidRequestError(
            f"this engine samples with TensorRT-LLM 1.2's {named}, which "
            + "; ".join(ignored)
            + f": set {pool}.engine.sampler {Sampler.TRTLLM} to have {them} applied, or leave "
            f"{them} out")
