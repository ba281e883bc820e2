"""What a benchmark sends: the i-th request's prompt and lengths, reproducibly.

Request ``i`` is drawn from its own generator seeded with ``(seed, i)``, so it is the same in
every run with the same seed -- whatever the arrival process, the concurrency or the model
(``--compare`` and ``--rates`` send identical requests). With the deployment's tokenizer
(:class:`pdtrt.bench.prompts.TokenizerPrompts`) synthetic prompts are exactly ``isl`` of its
tokens and input tokens are counted with it. Without one, synthetic prompts are ``isl``
whitespace-separated words (``t<k>``, k random) and input tokens are counted as words: exact
for word-level test models, an approximation for a real tokenizer. A JSONL dataset supplies
prompts instead (one object per line: ``prompt``, optional ``max_tokens``), cycled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdtrt.bench.lengths import LengthDist
from pdtrt.bench.prompts import TokenizerPrompts
from pdtrt.errors import BenchError

__all__ = ["DatasetPrompt", "PlannedRequest", "Workload", "load_dataset"]


@dataclass(frozen=True, kw_only=True)
class DatasetPrompt:
    prompt: str
    max_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class PlannedRequest:
    index: int
    prompt: str
    input_tokens: int
    max_tokens: int


@dataclass(frozen=True, kw_only=True)
class Workload:
    isl: LengthDist
    osl: LengthDist
    seed: int = 0
    dataset: tuple[DatasetPrompt, ...] = ()
    vocab_size: int = 1000  # of the synthetic words
    tokenizer: TokenizerPrompts | None = field(default=None, compare=False)

    @property
    def length_unit(self) -> str:
        """What input lengths count: the tokenizer's tokens, or words."""
        return f"tokens ({self.tokenizer.source})" if self.tokenizer else "words"

    def request(self, index: int) -> PlannedRequest:
        rng = np.random.default_rng([self.seed, index])
        if self.dataset:
            item = self.dataset[index % len(self.dataset)]
            max_tokens = item.max_tokens or self.osl.sample(rng)
            n = self.tokenizer.count(item.prompt) if self.tokenizer else len(item.prompt.split())
            return PlannedRequest(index=index, prompt=item.prompt, input_tokens=n,
                                  max_tokens=max_tokens)
        isl = self.isl.sample(rng)
        if self.tokenizer is not None:
            prompt, n = self.tokenizer.make(rng, isl)
        else:
            words = rng.integers(0, self.vocab_size, size=isl)
            prompt, n = " ".join(f"t{w}" for w in words), isl
        return PlannedRequest(index=index, prompt=prompt, input_tokens=n,
                              max_tokens=self.osl.sample(rng))


def load_dataset(path: Path) -> tuple[DatasetPrompt, ...]:
    """Read a JSONL prompt file; raises BenchError naming the file and line of a bad entry."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise BenchError(f"cannot read the dataset {path}: {exc.strerror}") from None
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{path}:{number}: not JSON: {exc.msg}") from None
        prompt = obj.get("prompt") if isinstance(obj, dict) else None
        max_tokens = obj.get("max_tokens") if isinstance(obj, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise BenchError(f"{path}:{number}: needs a non-empty string 'prompt'",
                             hint='one object per line: {"prompt": "...", "max_tokens": 64}')
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise BenchError(f"{path}:{number}: 'max_tokens' must be an integer >= 1")
        items.append(DatasetPrompt(prompt=prompt, max_tokens=max_tokens))
    if not items:
        raise BenchError(f"the dataset {path} has no prompts")
    return tuple(items)
