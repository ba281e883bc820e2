"""A GGUF file converted once into a Hugging Face checkpoint the reference engine loads fast.

Reading a GGUF costs tens of seconds (parsing the metadata -- 49k tokens and merges for
SmolLM2 --, dequantising every tensor, building the tokenizer); ``from_pretrained`` of
safetensors costs one. So ``pdtrt build`` converts it once, reading the GGUF once with
transformers' ``load_gguf_checkpoint``: the config, the weights (dequantised, cast to the spec's
dtype, saved as ``model.safetensors``) and the tokenizer (``tokenizer.json``, its config and the
model's own chat template).

``AutoConfig`` / ``AutoTokenizer`` / ``LlamaForCausalLM.from_pretrained(gguf_file=...)`` give
the same files (checked byte for byte on SmolLM2, but ``tokenizer_class``) but each re-reads the
GGUF's metadata -- four reads, three times as long on this 2-core machine -- and the last
refuses to run without ``accelerate``, which nothing else here needs. So this module does what
they do inside, on one read (transformers is pinned). The GGUF's tokenizer
metadata may name the wrong end-of-turn token (SmolLM2's names ``<|im_start|>``) or add a BOS
the model's own tokenizer does not, so the caller passes :class:`TokenFixes` from the model's
pin (``pdtrt/data/weight_sources.yaml``).

Nothing half-written: everything goes into a temporary directory beside ``out_dir``, renamed
into place when complete; a directory at ``out_dir`` is therefore a whole conversion.
"""

from __future__ import annotations

import contextlib
import importlib.util
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


def _convert(gguf: Path, out: Path, *, dtype: str, num_layers: int, tokens: TokenFixes,
             step: _Steps) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizerFast
    from transformers.integrations.ggml import convert_gguf_tokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    step("transformers loaded; reading the GGUF")
    # A model on the meta device: only its parameter names, for the GGUF -> HF name map.
    with torch.device("meta"):
        skeleton = LlamaForCausalLM(LlamaConfig(num_hidden_layers=num_layers))
    parsed = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=skeleton)
    config = LlamaConfig.from_dict(parsed["config"])
    if parsed["config"].get("model_type") != "llama" or config.num_hidden_layers != num_layers:
        raise BuildError(f"{gguf} holds a {parsed['config'].get('model_type')} model with "
                         f"{config.num_hidden_layers} layers; the model's config says llama "
                         f"with {num_layers}",
                         hint="point model.path at a GGUF of the model that model.name names")
    step(f"read and dequantised {len(parsed['tensors'])} tensors: {config.num_hidden_layers} "
         f"layers, hidden {config.hidden_size}, {config.num_attention_heads} heads / "
         f"{config.num_key_value_heads} KV heads")
    # what AutoTokenizer.from_pretrained(gguf_file=...) does, on the metadata read above
    backend, extra = convert_gguf_tokenizer("llama", parsed["tokenizer"])
    tokenizer = LlamaTokenizerFast(tokenizer_object=backend,
                                   **{**parsed["tokenizer_config"], **extra})
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
    model = LlamaForCausalLM(config)
    result = model.load_state_dict(parsed["tensors"], strict=False)
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


def convert_gguf(gguf: Path, out_dir: Path, *, dtype: str, num_layers: int, log: Path,
                 tokens: TokenFixes = TokenFixes(),
                 progress: Callable[[str], None] | None = None) -> Path:
    """Convert ``gguf`` into a Hugging Face checkpoint at ``out_dir`` (torch dtype ``dtype``,
    e.g. ``"float32"``); a no-op when ``out_dir`` exists. ``num_layers``: the model's, from its
    config (the GGUF must agree). Raises :class:`BuildError`."""
    if out_dir.is_dir():
        return out_dir
    if importlib.util.find_spec("gguf") is None:  # transformers' GGUF reader needs it
        raise BuildError(f"converting {gguf.name} needs the gguf package, which is not installed",
                         hint="pip install 'pdtrt[reference]' (gguf==0.19.0), or point "
                         "model.path at a Hugging Face checkpoint directory")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
    try:
        # transformers' own tqdm bar and warnings go to the step's log, not the CLI's terminal
        with log.open("a", encoding="utf-8") as err, contextlib.redirect_stderr(err):
            _convert(gguf, tmp, dtype=dtype, num_layers=num_layers, tokens=tokens,
                     step=_Steps(log, progress or (lambda _line: None)))
        os.replace(tmp, out_dir)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BuildError(f"cannot convert {gguf}: {exc}",
                         hint="check the file is a whole GGUF (delete it and fetch it again), "
                         "or point model.path at a Hugging Face checkpoint directory") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
