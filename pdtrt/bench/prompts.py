"""Benchmark prompts measured in the server's own tokens (``pdtrt bench --tokenizer DIR``).

Without a tokenizer a synthetic prompt of length ``n`` is ``n`` words and its input length is
counted in words (exact only for word-level test models). With the deployment's tokenizer --
the one its preprocessing model loads -- a synthetic prompt is built to encode to exactly
``n`` tokens the way the preprocessing model encodes it (``tokenizer.encode(text)``, special
tokens included), and dataset prompts are counted the same way. Building: draw random token
ids among those that survive a decode/encode round trip on their own (not special, not a
partial UTF-8 byte), decode them to text, re-encode (neighbours can still merge), then cut or
extend and repeat until the count is exact; the count reported is always the re-encoded one,
so a prompt that cannot be made exact is never mislabelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pdtrt.errors import BenchError

__all__ = ["TokenizerPrompts"]

_ROUNDS = 16  # decode/encode rounds before settling for the closest count


def _round_trip_tokens(tokenizer: Any) -> list[int]:
    """Ordinary token ids that decode to whole characters and encode back to themselves."""
    special = set(tokenizer.all_special_ids)
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[i] for i in ids])
    again = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return [i for i, text, back in zip(ids, texts, again, strict=True)
            if back == [i] and "\ufffd" not in text]


class TokenizerPrompts:
    """Synthetic prompts of exact token lengths, and token counts, for one tokenizer."""

    def __init__(self, tokenizer: Any, *, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source
        self._vocab = np.array(_round_trip_tokens(tokenizer))
        if self._vocab.size == 0:
            raise BenchError(f"the tokenizer {source} has no ordinary tokens")
        self._added = len(tokenizer.encode(""))  # special tokens encode() adds (e.g. BOS)

    @classmethod
    def load(cls, path: Path) -> TokenizerPrompts:
        """A Hugging Face tokenizer from a local directory (no download, no remote code)."""
        if not path.is_dir():
            raise BenchError(f"the tokenizer directory {path} does not exist",
                             hint="pass the directory the preprocessing model loads, e.g. "
                             "engines/<deployment>/tokenizer for the reference target")
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                                      trust_remote_code=False)
        except ImportError:
            raise BenchError("--tokenizer needs the transformers package",
                             hint="pip install 'pdtrt[reference]'") from None
        except Exception as exc:  # transformers fails in many ways on a wrong directory
            raise BenchError(f"cannot load a tokenizer from {path}: {type(exc).__name__}: "
                             f"{exc}", hint="it needs tokenizer.json or the files of a "
                             "Hugging Face tokenizer (tokenizer_config.json, ...)") from None
        # only counting here: no "longer than the maximum sequence length" warnings (the
        # server's limits apply to the request, and a too-long prompt fails there, clearly)
        tokenizer.model_max_length = 1 << 62
        return cls(tokenizer, source=str(path))

    def count(self, text: str) -> int:
        """Input tokens of ``text`` as the preprocessing model counts them."""
        return len(self.tokenizer.encode(text))

    def make(self, rng: np.random.Generator, n: int) -> tuple[str, int]:
        """A prompt of ``n`` tokens (at least one ordinary token) and its actual count."""
        want = max(1, n - self._added)
        ids = rng.choice(self._vocab, size=want).tolist()
        best: tuple[str, int] | None = None
        for _ in range(_ROUNDS):
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            got = self.tokenizer.encode(text, add_special_tokens=False)
            total = len(got) + self._added
            if best is None or abs(total - n) < abs(best[1] - n):
                best = (text, total)
            if len(got) == want:
                return text, total
            ids = got[:want] if len(got) > want else \
                got + rng.choice(self._vocab, size=want - len(got)).tolist()
        assert best is not None
        return best
