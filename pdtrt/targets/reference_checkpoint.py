"""The reference target's "engines": a seeded Llama-family checkpoint and an offline tokenizer.

``write_reference_checkpoint`` writes a Hugging Face checkpoint into a phase directory: either
``LlamaForCausalLM(LlamaConfig(<model config>))`` initialised under ``torch.manual_seed(seed)``
and saved with ``save_pretrained(safe_serialization=True)``, or symlinks to a real checkpoint's
files: a local one ``model.path`` points at, or one converted from a GGUF file -- ``model.path``,
or the pinned download of ``model.name`` (:mod:`pdtrt.targets.checkpoint_source`). The reference
engine runtime loads it with ``from_pretrained(phase_dir)``.

``write_reference_tokenizer`` trains a byte-level BPE tokenizer with the ``tokenizers`` library
on the text pdtrt ships (``pdtrt/data/corpus/reference.txt``), vocabulary = the model's
``vocab_size``, specials ``<pad>``/``<s>``/``</s>`` at ids 0/1/2 (the model's pad/bos/eos), and
saves it in Hugging Face format (``PreTrainedTokenizerFast.save_pretrained``). A real
checkpoint's own tokenizer files are linked instead when it has them.

Both are deterministic: the same inputs give byte-identical files. torch, transformers and
tokenizers are imported lazily (they take seconds to import).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.manifest import MANIFEST_NAME, STAMP_NAME
from pdtrt.enums import DType
from pdtrt.errors import BuildError
from pdtrt.targets.checkpoint_source import (
    SourceKind,
    checkpoint_source,
    materialize,
    source_inputs,
)

__all__ = [
    "CORPUS_RESOURCE",
    "checkpoint_inputs",
    "model_config_dict",
    "real_checkpoint_dir",
    "reference_versions",
    "tokenizer_inputs",
    "write_reference_checkpoint",
    "write_reference_tokenizer",
]

CORPUS_RESOURCE = "data/corpus/reference.txt"
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2
# The reference tokenizer's chat template (Hugging Face's format), so the CPU deployment serves
# /v1/chat/completions as a real checkpoint's tokenizer does: ChatML-like turns after BOS.
REFERENCE_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n"
    "{% endif %}")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "tokenizer.model", "chat_template.jinja")
_TORCH_DTYPES = {DType.FP32: "float32", DType.BF16: "bfloat16", DType.FP16: "float16"}


def _model_path(dep: Deployment) -> Path | None:
    if dep.spec.model.path is None:
        return None
    return (dep.source.resolve().parent / dep.spec.model.path).resolve()


def real_checkpoint_dir(dep: Deployment) -> Path | None:
    """``model.path`` when it is a directory holding weights (a checkpoint to use as is)."""
    src = checkpoint_source(dep)
    return src.path if src.kind is SourceKind.CHECKPOINT_DIR else None


def _real_dir(dep: Deployment, log: Path | None,
              progress: Callable[[str], None] | None) -> Path | None:
    """The real checkpoint to link (fetched and converted when needed), None to generate."""
    src = checkpoint_source(dep)
    if src.kind is SourceKind.GENERATED:
        return None
    return materialize(dep, src, log=log or Path(os.devnull), progress=progress)


def model_config_dict(dep: Deployment) -> dict[str, Any]:
    """The model's HF ``config.json`` as a dict (``model.path``, else the built-in config)."""
    path = _model_path(dep)
    if path is not None:
        file = path / "config.json" if path.is_dir() else path
        return json.loads(file.read_text(encoding="utf-8"))
    name = dep.spec.model.name.replace("/", "--", 1) + ".json"
    text = resources.files("pdtrt").joinpath("data/models").joinpath(name).read_text("utf-8")
    return json.loads(text)


def _versions(*dists: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in dists:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


def reference_versions() -> dict[str, str | None]:
    """The manifest's ``versions`` on the reference target (no TensorRT-LLM)."""
    return {"tensorrt_llm": None, **_versions("torch", "transformers", "tokenizers")}


def _digest(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _corpus_text() -> str:
    return resources.files("pdtrt").joinpath(CORPUS_RESOURCE).read_text(encoding="utf-8")


def checkpoint_inputs(dep: Deployment) -> dict[str, str]:
    """What the checkpoint depends on, as hashes (the manifest's ``input_hashes``)."""
    src = checkpoint_source(dep)
    if src.kind in (SourceKind.GGUF_FILE, SourceKind.PINNED_WHEEL):
        return {"converted": _digest({**source_inputs(dep, src),
                                      **_versions("torch", "transformers", "gguf")})}
    real = real_checkpoint_dir(dep)
    if real is not None:
        files = sorted((p.name, p.stat().st_size) for p in real.iterdir() if p.is_file())
        return {"checkpoint": _digest({"linked": str(real), "files": files})}
    return {"model_config": _digest(model_config_dict(dep)),
            "generator": _digest({"seed": dep.spec.model.seed, "dtype": str(dep.spec.model.dtype),
                                  **_versions("torch", "transformers")})}


def tokenizer_inputs(dep: Deployment) -> dict[str, str]:
    src = checkpoint_source(dep)
    if src.kind in (SourceKind.GGUF_FILE, SourceKind.PINNED_WHEEL):
        return {"converted": _digest({**source_inputs(dep, src),
                                      **_versions("tokenizers", "transformers", "gguf")})}
    real = real_checkpoint_dir(dep)
    if real is not None and (real / "tokenizer.json").is_file():
        return {"tokenizer": _digest({"linked": str(real),
                                      "tokenizer_json": (real / "tokenizer.json").stat().st_size})}
    config = model_config_dict(dep)
    return {"corpus": hashlib.sha256(_corpus_text().encode()).hexdigest(),
            "trainer": _digest({"vocab_size": config["vocab_size"],
                                "chat_template": REFERENCE_CHAT_TEMPLATE,
                                **_versions("tokenizers", "transformers")})}


def _link_files(src: Path, out_dir: Path, names: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        link = out_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(src / name, link)


def write_reference_checkpoint(dep: Deployment, out_dir: Path, *, log: Path | None = None,
                               progress: Callable[[str], None] | None = None) -> None:
    """Write (or link) the HF checkpoint of ``dep``'s model into ``out_dir``; a download or
    conversion logs into ``log`` and reports to ``progress``."""
    real = _real_dir(dep, log, progress)
    if real is not None:
        # pdtrt's own files in a checkpoint that pdtrt built are not the checkpoint: linking
        # them would let this build's stamp and manifest overwrite the source's
        names = sorted(p.name for p in real.iterdir() if p.is_file()
                       and p.name not in (*_TOKENIZER_FILES, STAMP_NAME, MANIFEST_NAME))
        _link_files(real, out_dir, names)
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = dict(model_config_dict(dep))
    if config.get("model_type") != "llama":
        raise BuildError(f"the reference target generates Llama checkpoints; "
                         f"{dep.spec.model.name} is '{config.get('model_type')}'",
                         hint="point model.path at a local checkpoint with weights instead")
    for key in ("architectures", "model_type", "torch_dtype", "transformers_version"):
        config.pop(key, None)
    config["pad_token_id"] = 0
    dtype = _TORCH_DTYPES[dep.spec.model.dtype]
    torch.manual_seed(dep.spec.model.seed)
    model = LlamaForCausalLM(LlamaConfig(**config, torch_dtype=dtype))
    model = model.to(getattr(torch, dtype)).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)


def write_reference_tokenizer(dep: Deployment, out_dir: Path, *, log: Path | None = None,
                              progress: Callable[[str], None] | None = None) -> None:
    """Train (or link) the tokenizer of ``dep`` into ``out_dir`` in HF format."""
    real = _real_dir(dep, log, progress)
    if real is not None and (real / "tokenizer.json").is_file():
        _link_files(real, out_dir, [n for n in _TOKENIZER_FILES if (real / n).is_file()])
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    config = model_config_dict(dep)
    vocab_size = int(config["vocab_size"])
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(SPECIAL_TOKENS):
        raise BuildError(f"vocab_size {vocab_size} is too small for a byte-level tokenizer",
                         hint=f"use vocab_size >= {len(alphabet) + len(SPECIAL_TOKENS)}")
    for key, want in (("pad_token_id", 0), ("bos_token_id", 1), ("eos_token_id", 2)):
        if config.get(key) not in (None, want):
            raise BuildError(f"the reference tokenizer puts {SPECIAL_TOKENS[want]} at id {want}"
                             f", but the model config has {key} {config[key]}",
                             hint=f"set {key}: {want} in the model's config.json")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(_corpus_text().splitlines(keepends=True), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=int(config.get("max_position_embeddings") or 2048))
    fast.chat_template = REFERENCE_CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
