"""Fakes at the front's seams: a byte-level tokenizer and an engine client that records stops."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from pdtrt.engine_io import TIMING_INPUT, TOP_LOG_PROBS_INPUT
from pdtrt.front.deployment import ServedDeployment
from pdtrt.front.engine_client import StreamedTokens
from pdtrt.front.text import FrontTokenizer

EOS = 0
TIMING = {"ttft_ms": 3.0, "queue_ms": 1.0, "prefill_ms": 2.0}  # what FakeEngine's router times


class ByteTokenizer:
    """Hugging Face's tokenizer surface the front uses, one token per UTF-8 byte (id = byte +
    1; 0 is EOS) -- so multi-byte characters split across tokens, as in byte-level BPE."""

    eos_token_id = EOS
    pad_token_id = None
    chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [b + 1 for b in text.encode()]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return bytes(i - 1 for i in ids if i != EOS).decode("utf-8", "replace")

    def apply_chat_template(self, messages, chat_template, tokenize, add_generation_prompt):
        from jinja2 import Template

        return Template(chat_template).render(messages=messages) + "assistant: "


def byte_tokenizer() -> FrontTokenizer:
    return FrontTokenizer(ByteTokenizer())


def deployment(max_seq_len: int = 64) -> ServedDeployment:
    from pathlib import Path

    return ServedDeployment(name="dep", model_id="org/model", engine_model="router",
                      tokenizer_dir=Path("/nonexistent"), max_seq_len=max_seq_len,
                      max_input_len=max_seq_len - 8)


@dataclass
class FakeEngine:
    """Answers each request with ``reply`` (text, one token per byte), one step per token
    every ``step_s``; ``error`` after ``fail_after`` steps. Records what it was sent, and the
    requests left before their end (which the real client stops on the server)."""

    reply: str = "hello world"
    step_s: float = 0.0
    error: str | None = None
    fail_after: int = 0
    sent: list[dict] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    has_timing: bool = True  # a router: answers return_timing with TIMING on its last response
    chosen_in_top: bool = True  # each token among its alternatives (else ranked below them)

    async def generate(self, request_id, inputs, *, logprobs, traceparent=None):
        self.sent.append({"id": request_id, "inputs": inputs, "logprobs": logprobs,
                          "traceparent": traceparent})
        ids = [b + 1 for b in self.reply.encode()]
        limit = int(inputs["request_output_len"].reshape(-1)[0])
        done = False
        try:
            for n, token in enumerate(ids[:limit]):
                if self.error is not None and n == self.fail_after:
                    done = True
                    from pdtrt.errors import ApiError

                    raise ApiError(self.error, status=500, type="server_error")
                await asyncio.sleep(self.step_s)
                k = int(inputs[TOP_LOG_PROBS_INPUT].reshape(-1)[0]) \
                    if TOP_LOG_PROBS_INPUT in inputs else 0
                yield StreamedTokens([token], [-0.5] if logprobs else None,
                                     [self.alternatives(token, k)] if logprobs and k else None)
            if TIMING_INPUT in inputs:  # the router's final response with the timing alone
                yield StreamedTokens([], None, timing=TIMING)
            done = True
            self.finished.append(request_id)
        finally:
            if not done:
                self.stopped.append(request_id)

    def alternatives(self, token: int, k: int) -> tuple[tuple[int, float], ...]:
        """``k`` alternatives of ``token``, best first: the token itself at -0.5 and the next
        ids below it (or, ``chosen_in_top`` False, ids above it: -0.5 is outside them)."""
        if self.chosen_in_top:
            return ((token, -0.5), *((token + j, -0.5 - j) for j in range(1, k)))
        return tuple((token + j, -0.5 + 0.1 * (k + 1 - j)) for j in range(1, k + 1))

    async def close(self) -> None:
        pass
