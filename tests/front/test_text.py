"""Detokenizing streamed tokens and holding stop strings back (pdtrt.front.text)."""

from __future__ import annotations

import pytest

from pdtrt.errors import ApiError
from pdtrt.front.text import Detokenizer, FrontTokenizer, StopStrings
from tests.front.fakes import ByteTokenizer, byte_tokenizer


def _stream(text: str) -> list[str]:
    detok = Detokenizer(byte_tokenizer())
    out = [detok.add([b + 1]) for b in text.encode()]
    return [*out, detok.flush()]


@pytest.mark.parametrize("text", ["plain ascii", "naïve café", "日本語 ok", "emoji 🙂 end"],
                         ids=["ascii", "2-byte", "3-byte", "4-byte"])
def test_a_character_split_across_tokens_is_sent_whole_once_complete(text):
    pieces = _stream(text)
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    # a piece is never part of a character: each decodes on its own boundary
    assert all(p.encode().decode() == p for p in pieces)


def test_an_incomplete_character_at_the_end_is_flushed_as_the_replacement():
    detok = Detokenizer(byte_tokenizer())
    assert detok.add([b + 1 for b in "é".encode()[:1]]) == ""
    assert detok.flush() == "\ufffd"


@pytest.mark.parametrize(("deltas", "stops", "sent", "hit"), [
    (["Hello", " wor", "ld"], ("world",), "Hello ", True),
    (["Hello", " wo", "rk"], ("world",), "Hello work", False),
    (["a", "bEN", "Dc"], ("END",), "ab", True),
    (["xy", "z"], ("yz", "q"), "x", True),
    (["no stops here"], (), "no stops here", False),
], ids=["cut-before", "prefix-then-not", "spanning-deltas", "two-stops", "none"])
def test_stop_strings_are_never_sent_even_in_part(deltas, stops, sent, hit):
    held = StopStrings(stops)
    pieces = [held.add(d) for d in deltas]
    pieces.append(held.flush())
    assert "".join(pieces) == sent and held.hit is hit
    for stop in stops:  # no prefix of a stop string went out before it was decided
        assert stop not in "".join(pieces)


def test_a_tail_that_may_start_a_stop_string_waits():
    held = StopStrings(("</end>",))
    assert held.add("text </e") == "text "
    assert held.add("x") == "</ex"


def test_chat_without_a_template_is_a_clear_400():
    class NoTemplate(ByteTokenizer):
        chat_template = None

    with pytest.raises(ApiError) as err:
        FrontTokenizer(NoTemplate()).chat([{"role": "user", "content": "hi"}])
    assert err.value.status == 400 and "has no chat template" in err.value.message
    assert "--chat-template" in (err.value.hint or "")


def test_a_template_file_serves_chat_for_a_tokenizer_without_one():
    class NoTemplate(ByteTokenizer):
        chat_template = None

    tok = FrontTokenizer(NoTemplate(), chat_template="{{ messages[0]['content'] }}|")
    assert ByteTokenizer().decode(tok.chat([{"role": "user", "content": "hi"}])) == \
        "hi|assistant: "
