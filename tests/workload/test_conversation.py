"""A chat workload's shape: prompts that grow by turn, and what block reuse leaves to compute."""

from __future__ import annotations

import pytest

from pdtrt.errors import WorkloadError
from pdtrt.workload import ConversationShape


def test_prompts_grow_by_the_previous_answer_and_the_new_tokens():
    c = ConversationShape(isl=600, osl=100, shared_prefix=512, turns=4, followup_isl=50)
    assert [c.prompt(k) for k in range(4)] == [600, 750, 900, 1050]
    assert c.longest_prompt == 1050 and c.mean_prompt == 825.0 and c.reuses
    assert c.new_tokens == 50
    assert ConversationShape(isl=600, osl=100, turns=2).prompt(1) == 600 + 100 + 600


def test_reuse_leaves_the_prompt_less_the_whole_blocks_held():
    c = ConversationShape(isl=600, osl=100, shared_prefix=512, turns=4, followup_isl=50)
    # turn 0: the shared 512 tokens are 16 whole blocks of 32
    assert c.computed_tokens(0, block=32) == 600 - 512
    # turn 1: the previous prompt's 600 tokens hold 18 whole blocks (576); the answer and the
    # new tokens, and the 24 tokens of the last partial block, are computed
    assert c.computed_tokens(1, block=32) == 750 - 576
    assert c.computed_tokens(2, block=32) == 900 - 736  # 750 -> 23 blocks
    assert c.mean_computed_tokens(block=32) == pytest.approx((88 + 174 + 164 + 154) / 4)
    # a coarser block keeps less
    assert c.computed_tokens(0, block=128) == 600 - 512
    assert c.computed_tokens(1, block=128) == 750 - 512


def test_the_last_prompt_token_is_always_computed():
    whole = ConversationShape(isl=64, osl=8, shared_prefix=64)
    assert whole.computed_tokens(0, block=32) == 32  # at most 63 reusable: one block


def test_a_single_request_workload_reuses_nothing():
    c = ConversationShape(isl=3000, osl=500)
    assert not c.reuses and c.longest_prompt == c.mean_prompt == 3000
    assert c.mean_computed_tokens(block=32) == 3000


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"shared_prefix": 700}, "not within the first turn's prompt of 600"),
    ({"turns": 0}, "at least 1"),
    ({"think_s": 2.0}, "more than one turn"),
    ({"followup_isl": 40}, "more than one turn"),
    ({"turns": 2, "think_s": float("inf")}, "finite"),
    ({"turns": 2, "followup_isl": 0}, "at least one token"),
    ({"osl": 0}, "at least one token"),
], ids=["prefix-too-long", "no-turns", "think-one-turn", "followup-one-turn", "think-inf",
        "empty-followup", "no-answer"])
def test_bad_shapes_say_what_is_wrong(kwargs, match):
    with pytest.raises(WorkloadError, match=match):
        ConversationShape(**{"isl": 600, "osl": 100, **kwargs})
