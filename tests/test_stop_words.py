"""The stop-word matching rule the reference sampler and the router share (pdtrt.stop_words)."""

from __future__ import annotations

import pytest

from pdtrt.stop_words import completed_stop_word

PROMPT = (1, 2, 3)

# (output so far, words, the word that completed)
CASES = [
    pytest.param([4], [(4,)], (4,), id="one-token-word-is-the-last-token"),
    pytest.param([4, 5], [(4,)], None, id="a-word-earlier-in-the-output-is-past"),
    pytest.param([4, 5], [(4, 5)], (4, 5), id="two-token-word-in-the-output"),
    pytest.param([4], [(3, 4)], (3, 4), id="word-begins-in-the-prompt"),
    pytest.param([4], [(1, 2, 3, 4)], (1, 2, 3, 4), id="word-covers-the-whole-sequence"),
    pytest.param([4], [(0, 1, 2, 3, 4)], None, id="word-longer-than-the-sequence"),
    pytest.param([], [(3,)], (3,), id="the-prompt-alone-ends-with-it"),
    pytest.param([4], [(), (9,), (4,)], (4,), id="empty-and-unmatched-words-skipped"),
    pytest.param([4], [(3, 4), (4,)], (3, 4), id="the-first-listed-word-wins"),
    pytest.param([4], [], None, id="no-words"),
]


@pytest.mark.parametrize(("output", "words", "expected"), CASES)
def test_a_word_completes_when_prompt_and_output_end_with_it(output, words, expected):
    assert completed_stop_word(PROMPT, output, words) == expected
