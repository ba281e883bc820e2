"""Text in and out of the front: prompts to token ids, token ids back to text, stop strings.

The front tokenizes with the deployment's own Hugging Face tokenizer (the one the
``preprocessing`` model loads, ``tokenizer_dir`` of ``pdtrt-repo.json``) and applies its chat
template, as trtllm-serve and vLLM do; a tokenizer without one cannot serve
``/v1/chat/completions`` (a clear 400), unless the front is given a template file.

:class:`Detokenizer` turns streamed token ids into text deltas without splitting a character:
it decodes a small window (the tokens since the last emitted boundary) and holds the text back
while it ends in U+FFFD, the replacement for an incomplete UTF-8 sequence -- the method of
Hugging Face's ``TextStreamer`` and TGI. :class:`StopStrings` finds OpenAI ``stop`` strings in
the text as it grows and holds back any tail that could still become one, so a stop string is
never sent, even in part; the generated text is cut before it, as OpenAI does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdtrt.errors import ApiError, ServerError

__all__ = ["Detokenizer", "FrontTokenizer", "StopStrings"]


class FrontTokenizer:
    """The deployment's tokenizer, loaded once from a local directory (no remote code)."""

    def __init__(self, tokenizer: Any, *, chat_template: str | None = None) -> None:
        self.hf = tokenizer
        self.chat_template = chat_template or getattr(tokenizer, "chat_template", None)
        self.eos_id: int | None = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_id: int | None = pad if pad is not None else self.eos_id

    @classmethod
    def load(cls, path: Path, *, chat_template: Path | None = None) -> FrontTokenizer:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                                trust_remote_code=False)
        except (OSError, ValueError) as exc:
            raise ServerError(f"cannot load the deployment's tokenizer from {path}: {exc}",
                              hint="is the repository's tokenizer_dir still there?") from None
        template = None
        if chat_template is not None:
            try:
                template = chat_template.read_text()
            except OSError as exc:
                raise ServerError(f"cannot read the chat template {chat_template}: "
                                  f"{exc.strerror}") from None
        return cls(tok, chat_template=template)

    def encode(self, text: str) -> list[int]:
        """A completion prompt's ids, with the tokenizer's special tokens (BOS), as the
        ``preprocessing`` model encodes ``text_input``."""
        return list(self.hf.encode(text))

    def chat(self, messages: list[dict[str, str]]) -> list[int]:
        """The ids of a conversation through the chat template, ready for the assistant's turn."""
        if not self.chat_template:
            raise ApiError("this deployment's tokenizer has no chat template, so it cannot "
                           "serve /v1/chat/completions", param="messages",
                           hint="use /v1/completions, or start the front with --chat-template "
                           "FILE")
        try:
            text = self.hf.apply_chat_template(messages, chat_template=self.chat_template,
                                               tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # the template's own error (jinja2 raise_exception)
            raise ApiError(f"the chat template refused the messages: {exc}",
                           param="messages") from None
        # The template writes the special tokens (BOS) itself: add none again.
        return list(self.hf.encode(text, add_special_tokens=False))

    def token_text(self, token_id: int) -> str:
        return self.hf.decode([token_id], skip_special_tokens=False)


@dataclass
class Detokenizer:
    """Streamed token ids -> text deltas, never splitting a multi-byte character."""

    tokenizer: FrontTokenizer
    ids: list[int] = field(default_factory=list)
    _prefix: int = 0  # ids[_prefix:_read] decoded to the text already emitted for that window
    _read: int = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.hf.decode(ids, skip_special_tokens=True)

    def add(self, token_ids: list[int]) -> str:
        """The text that ``token_ids`` add (maybe "" while a character is incomplete)."""
        self.ids.extend(token_ids)
        before = self._decode(self.ids[self._prefix:self._read])
        now = self._decode(self.ids[self._prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return now[len(before):]
        return ""

    def flush(self) -> str:
        """What is still held back at the end (an incomplete character stays U+FFFD)."""
        before = self._decode(self.ids[self._prefix:self._read])
        now = self._decode(self.ids[self._prefix:])
        self._prefix = self._read = len(self.ids)
        return now[len(before):]


@dataclass
class StopStrings:
    """Holds generated text back until it cannot be part of a stop string; ``hit`` once one
    appeared (the text is cut before it)."""

    stops: tuple[str, ...]
    text: str = ""
    _sent: int = 0
    hit: bool = False

    def add(self, delta: str) -> str:
        """The part of the text so far that is safe to send now."""
        if self.hit:
            return ""
        self.text += delta
        if not self.stops:
            return self._release(len(self.text))
        start = max(0, self._sent - max(len(s) for s in self.stops) + 1)
        found = [i for s in self.stops if (i := self.text.find(s, start)) >= 0]
        if found:
            self.hit = True
            self.text = self.text[:min(found)]
            return self._release(len(self.text))
        return self._release(len(self.text) - self._held_tail())

    def flush(self) -> str:
        """The rest, at the end of the stream (no stop string completed)."""
        return "" if self.hit else self._release(len(self.text))

    def _held_tail(self) -> int:
        """Length of the longest tail of the text that starts some stop string."""
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.text)), longest, -1):
                if self.text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _release(self, upto: int) -> str:
        upto = max(upto, self._sent)
        out, self._sent = self.text[self._sent:upto], upto
        return out
