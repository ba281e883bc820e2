"""TensorRT-LLM's sampling rules in the reference engine, on made-up logits: penalties,
min_tokens and bad words (:func:`process`), and the per-position draw seed that makes a
sequence split between two engines draw what it would draw in one. The same rules against
transformers' processors on a real model: test_reference_llm.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pdtrt.llmapi.reference.engine import (  # noqa: E402
    SequenceSampling,
    draw_seed,
    process,
    sample,
    top_logprobs,
)


def _logits() -> torch.Tensor:
    return torch.tensor([2.0, -1.0, 0.5, 3.0, -2.0, 1.0])


def test_repetition_presence_and_frequency_act_on_tokens_of_prompt_and_output():
    tokens = [3, 1, 3, 5]  # 3 twice, 1 and 5 once; 0, 2, 4 never
    got = process(_logits(), SequenceSampling(repetition_penalty=2.0, presence_penalty=0.5,
                                      frequency_penalty=0.25), tokens, 2, None)
    # penaltyKernels.cu: a seen token's positive logit divided, a negative one multiplied;
    # then presence once and frequency per occurrence
    want = [2.0, -1.0 * 2 - 0.5 - 0.25, 0.5, 3.0 / 2 - 0.5 - 0.5, -2.0, 1.0 / 2 - 0.5 - 0.25]
    assert got.tolist() == pytest.approx(want)


def test_temperature_comes_before_the_penalties_when_sampling_only():
    sampled = process(_logits(), SequenceSampling(greedy=False, temperature=0.5,
                                                  presence_penalty=1.0), [0], 0, None)
    greedy = process(_logits(), SequenceSampling(temperature=0.5, presence_penalty=1.0), [0], 0,
                     None)
    assert sampled[0] == pytest.approx(2.0 / 0.5 - 1.0) and greedy[0] == pytest.approx(1.0)


def test_min_tokens_bans_the_end_id_until_that_many_were_generated():
    rules = SequenceSampling(min_tokens=2)
    assert process(_logits(), rules, [], 1, end_id=3)[3] == float("-inf")
    assert process(_logits(), rules, [], 2, end_id=3)[3] == 3.0
    assert sample(process(_logits(), rules, [], 0, end_id=3), rules)[0] == 0  # not the max


def test_a_bad_word_bans_its_last_token_where_the_output_ends_with_the_rest():
    rules = SequenceSampling(bad_words=((4,), (1, 3), (2, 5, 0)))
    banned = process(_logits(), rules, [2, 2, 1], 0, None)
    assert banned[4] == banned[3] == float("-inf") and banned[0] == 2.0  # (2, 5) not matched
    assert process(_logits(), rules, [2, 5], 0, None)[0] == float("-inf")
    assert process(_logits(), rules, [], 0, None)[3] == 3.0  # too short to match (1, 3)


def test_a_draw_depends_on_the_seed_and_the_position_only():
    rules = SequenceSampling(greedy=False, temperature=1.0, seed=7)
    scores = torch.randn(512, generator=torch.Generator().manual_seed(0))

    def draw(seed: int, position: int) -> int:
        return sample(scores, rules, torch.Generator().manual_seed(draw_seed(seed, position)))[0]

    draws = [draw(7, p) for p in range(8)]
    assert draws == [draw(7, p) for p in range(8)]  # the same position: the same draw
    assert len(set(draws)) > 1 and draws != [draw(8, p) for p in range(8)]


def test_the_log_probability_is_of_the_processed_scores():
    rules = SequenceSampling(repetition_penalty=2.0, logprobs=True)
    scores = process(_logits(), rules, [3], 0, None)
    token, entry = sample(scores, rules)
    assert token == 0 and entry is not None
    assert entry[0].logprob == pytest.approx(float(torch.log_softmax(scores, -1)[0]))
    assert entry[0].rank == 1 and list(entry) == [0]  # k = 1: the best, which it chose


def test_top_k_log_probabilities_are_ranked_and_hold_the_chosen_token():
    """``logprobs`` = k: the k best of the log-softmax, ranked 1..k, and the chosen token with
    its own rank when it is not among them (TorchSampler's shape, docs/verification.md)."""
    scores = torch.tensor([0.0, 3.0, 1.0, 2.0, -1.0])
    want = torch.log_softmax(scores, -1)
    entry = top_logprobs(scores, 1, 3)  # chosen among the best three
    assert list(entry) == [1, 3, 2]
    assert [(e.rank, e.logprob) for e in entry.values()] == \
        [(r, pytest.approx(float(want[t]))) for r, t in enumerate([1, 3, 2], 1)]
    outside = top_logprobs(scores, 4, 2)  # a draw may pick a token outside the top-k
    assert list(outside) == [1, 3, 4] and outside[4].rank == 5
    assert outside[4].logprob == pytest.approx(float(want[4]))
    assert sample(scores, SequenceSampling(logprobs=0))[1] is None  # not asked: nothing
