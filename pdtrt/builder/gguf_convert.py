"""A GGUF file converted once into a Hugging Face checkpoint the reference engine loads fast.

Reading a GGUF costs tens of seconds (dequantising every tensor, building the tokenizer from
its metadata); ``from_pretrained`` of safetensors costs one. So ``pdtrt build`` converts it
once: the config (``AutoConfig.from_pretrained(dir, gguf_file=...)``), the weights
(transformers' ``load_gguf_checkpoint``, dequantised, cast to the spec's dtype, saved as
``model.safetensors``) and the tokenizer (``AutoTokenizer.from_pretrained(dir, gguf_file=...)``:
``tokenizer.json``, its config and the model's own chat template).

Weights are loaded through ``load_gguf_checkpoint`` into a model built from the config, which is
what ``LlamaForCausalLM.from_pretrained(gguf_file=...)`` does inside -- but that entry point
refuses to run without ``accelerate``, which nothing else here needs. The GGUF's tokenizer
metadata may name the wrong end-of-turn token (SmolLM2's names ``<|im_start|>``) or add a BOS
the model's own tokenizer does not, so the caller passes :class:`TokenFixes` from the model's
pin (``pdtrt/data/weight_sources.yaml``).

Nothing half-written: everything goes into a temporary directory beside ``out_dir``, renamed
into place when complete; a directory at ``out_dir`` is therefore a whole conversion.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pdtrt.errors import BuildError

__all__ = ["TokenFixes", "convert_gguf"]


class _Steps:
    """Logs each conversion step with the seconds it took, to the log and to ``progress``."""

    def __init__(self, log: Path, progress: Callable[[str], None]) -> None:
        self.log, self.progress = log, progress
        self.started = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        line = f"converting: {what} ({now - self.last:.1f} s, {now - self.started:.1f} s total)"
        self.last = now
        with self.log.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
        self.progress(line)


def _convert(gguf: Path, out: Path, *, dtype: str, tokens: TokenFixes, step: _Steps) -> None:
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    src_dir, name = str(gguf.parent), gguf.name
    step("starting (reading the GGUF's metadata)")
    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    if config.model_type != "llama":
        raise BuildError(f"{gguf} holds a '{config.model_type}' model; the reference engine "
                         "serves Llama-family checkpoints",
                         hint="point model.path at a Llama-family GGUF or checkpoint")
    step(f"config read: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
         f"{config.num_attention_heads} heads / {config.num_key_value_heads} KV heads")
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name, legacy=False)
    if tokens.eos_token is not None:
        tokenizer.eos_token = tokens.eos_token
    if tokens.pad_token is not None:
        tokenizer.pad_token = tokens.pad_token
    if tokens.add_bos_token is not None:
        tokenizer.add_bos_token = tokens.add_bos_token
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.bos_token_id = tokenizer.bos_token_id
    step(f"tokenizer built: vocab {len(tokenizer)}, eos {tokenizer.eos_token!r}")
    with torch.device("meta"):  # only its parameter names, for the GGUF -> HF name map
        skeleton = LlamaForCausalLM(config)
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True,
                                   model_to_load=skeleton)["tensors"]
    step(f"dequantised {len(tensors)} tensors")
    model = LlamaForCausalLM(config)
    result = model.load_state_dict(tensors, strict=False)
    missing = set(result.missing_keys) - ({"lm_head.weight"} if config.tie_word_embeddings
                                          else set())
    if missing or result.unexpected_keys:
        raise BuildError(f"{gguf}: weights do not match the model config (missing "
                         f"{sorted(missing)[:5]}, unexpected {result.unexpected_keys[:5]})",
                         hint="point model.path at a Llama-family GGUF or checkpoint")
    model.tie_weights()
    model = model.to(getattr(torch, dtype)).eval()
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    step(f"saved {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters "
         f"({dtype}) and the tokenizer into {out.name}")


@dataclass(frozen=True, kw_only=True)
class TokenFixes:
    """What a GGUF's tokenizer metadata gets wrong, from the model's pin (None: keep it)."""

    eos_token: str | None = None
    pad_token: str | None = None
    add_bos_token: bool | None = None


def convert_gguf(gguf: Path, out_dir: Path, *, dtype: str, log: Path,
                 tokens: TokenFixes = TokenFixes(),
                 progress: Callable[[str], None] | None = None) -> Path:
    """Convert ``gguf`` into a Hugging Face checkpoint at ``out_dir`` (torch dtype ``dtype``,
    e.g. ``"float32"``); a no-op when ``out_dir`` exists. Raises :class:`BuildError`."""
    if out_dir.is_dir():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        _convert(gguf, tmp, dtype=dtype, tokens=tokens,
                 step=_Steps(log, progress or (lambda _line: None)))
        os.replace(tmp, out_dir)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BuildError(f"cannot convert {gguf}: {exc}",
                         hint="check the file is a whole GGUF (delete it and fetch it again), "
                         "or point model.path at a Hugging Face checkpoint directory") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
