"""Benchmark prompts in the deployment's tokens (the reference tokenizer ``pdtrt build`` writes)."""

from __future__ import annotations

import numpy as np
import pytest

from pdtrt.bench import RequestPlan, parse_length
from pdtrt.bench.prompts import TokenizerPrompts
from pdtrt.bench.tokenizer_choice import TokenizerOrigin, choose_tokenizer, served_tokenizer_dir
from pdtrt.client.types import ModelSignature
from pdtrt.errors import BenchError, ModelNotFoundError
from pdtrt.workload.trace import TraceEntry

transformers = pytest.importorskip("transformers", reason="needs transformers (pdtrt[reference])")


@pytest.fixture(scope="module")
def prompts(reference_engines):
    root, dep = reference_engines
    return TokenizerPrompts.load(root / dep.spec.name / "tokenizer")


@pytest.mark.parametrize("n", [2, 3, 17, 48, 128, 700])
def test_synthetic_prompts_encode_to_exactly_n_tokens(prompts, n):
    for i in range(25):
        text, count = prompts.make(np.random.default_rng([7, i]), n)
        # the count is what the preprocessing model's tokenizer.encode() gives
        assert count == len(prompts.tokenizer.encode(text)) == n, (i, text)


def test_one_token_is_the_bos_plus_one_ordinary_token(prompts):
    text, count = prompts.make(np.random.default_rng(0), 1)
    assert text and count == len(prompts.tokenizer.encode(text)) == 2


def test_workload_with_a_tokenizer_counts_tokens_reproducibly(prompts):
    w = RequestPlan(isl=parse_length("uniform:10:60"), osl=parse_length("8"), seed=2,
                    tokenizer=prompts)
    first = [w.request(i) for i in range(10)]
    assert [w.request(i) for i in range(10)] == first  # seeded per request
    for r in first:
        assert r.input_tokens == prompts.count(r.prompt)
        assert 10 <= r.input_tokens <= 60
    assert w.length_unit.startswith("tokens (")
    words = RequestPlan(isl=parse_length("10"), osl=parse_length("8"))
    assert words.length_unit == "words" and words.request(0).input_tokens == 10


def test_dataset_prompts_are_counted_with_the_tokenizer(prompts):
    text = "The quick brown fox jumps over the lazy dog"
    w = RequestPlan(isl=parse_length("1"), osl=parse_length("4"), tokenizer=prompts,
                    dataset=(TraceEntry(prompt=text),))
    assert w.request(0).input_tokens == len(prompts.tokenizer.encode(text)) != len(text.split())


def test_bad_tokenizer_directories(tmp_path):
    with pytest.raises(BenchError, match="does not exist"):
        TokenizerPrompts.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="cannot load a tokenizer"):
        TokenizerPrompts.load(tmp_path / "empty")


class _Server:
    """A client stand-in: what each model's config says (``check`` as LLMClient's)."""

    def __init__(self, **signatures: ModelSignature) -> None:
        self.signatures = signatures

    def check(self, model: str) -> ModelSignature:
        if model not in self.signatures:
            raise ModelNotFoundError(f"no ready model '{model}'")
        return self.signatures[model]


def test_bench_defaults_to_the_specs_tokenizer_when_it_is_here(reference_engines, tmp_path,
                                                                monkeypatch):
    root, dep = reference_engines
    monkeypatch.chdir(tmp_path)
    bare = _Server(ensemble=ModelSignature(name="ensemble"))
    none = choose_tokenizer(bare, ["ensemble"])
    assert none.prompts is None and none.origin is TokenizerOrigin.NONE
    assert "the server names no tokenizer_dir for ensemble" in none.note
    assert choose_tokenizer(bare, ["ensemble"], deployment=dep).prompts is None  # no engines/
    (tmp_path / "engines").symlink_to(root)  # the default engines root, relative to here
    found = choose_tokenizer(bare, ["ensemble"], deployment=dep)
    assert found.origin is TokenizerOrigin.SPEC
    assert found.prompts.source == f"engines/{dep.spec.name}/tokenizer"
    option = choose_tokenizer(bare, ["ensemble"], tokenizer_dir=root / dep.spec.name / "tokenizer")
    assert option.origin is TokenizerOrigin.OPTION and option.note is None


def test_bench_finds_the_tokenizer_an_ensemble_step_names(reference_engines):
    root, dep = reference_engines
    here = str(root / dep.spec.name / "tokenizer")
    server = _Server(
        ensemble=ModelSignature(name="ensemble", steps=("preprocessing", "router", "gone")),
        preprocessing=ModelSignature(name="preprocessing", parameters={"tokenizer_dir": here}),
        router=ModelSignature(name="router"),
        remote=ModelSignature(name="remote", steps=("pre2",)),
        pre2=ModelSignature(name="pre2", parameters={"tokenizer_dir": "/nowhere/tok"}))
    assert served_tokenizer_dir(server, "ensemble") == here
    chosen = choose_tokenizer(server, ["ensemble"])
    assert chosen.origin is TokenizerOrigin.SERVER and chosen.prompts.source == here
    elsewhere = choose_tokenizer(server, ["remote"])
    assert elsewhere.prompts is None
    assert "the server's tokenizer /nowhere/tok is not on this machine" in elsewhere.note
