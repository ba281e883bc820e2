"""When a stop word ends a sequence: the one matching rule the reference engine's sampler and
the router share.

A stop word is a sequence of token ids (NVIDIA's ``stop_words_list``, one word per entry). It
*completes* when the sequence's tokens so far -- the prompt, then the output -- end with it, so
a word may begin in the prompt or in tokens an earlier phase produced. That is TensorRT-LLM's
TorchSampler rule (``_meet_stop_token_criteria`` in tensorrt_llm/_torch/pyexecutor/sampler.py,
NVIDIA/TensorRT-LLM at 00026bd121addd9ee5650a7da9fee6b57db79a6f: the tail of
``request.get_tokens(beam)``, prompt included; a word longer than the sequence never matches;
its fast path for one-token words, ``new_token in stop_words_list``, is the same rule).

*Whether* a completed word ends the sequence is the caller's: upstream checks the end id first,
then the length limit, and only then the stop words (``_handle_stop_criteria``), and checks
only tokens its sampler drew. This module knows nothing of that order; it holds no state and
imports nothing of pdtrt.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["completed_stop_word"]


def completed_stop_word(prompt: Sequence[int], output: Sequence[int],
                        words: Iterable[Sequence[int]]) -> tuple[int, ...] | None:
    """The first of ``words`` that ``prompt`` followed by ``output`` ends with, or None.

    Only the last ``len(word)`` tokens are looked at: ``output``'s alone when it is long
    enough, so a long prompt is not copied for every token of a long output. An empty word
    matches nothing.
    """
    for word in words:
        n = len(word)
        if n == 0 or n > len(prompt) + len(output):
            continue
        tail = output[-n:] if n <= len(output) else [*prompt[len(prompt) + len(output) - n:],
                                                      *output]
        if tuple(tail) == tuple(word):
            return tuple(word)
    return None
