"""The in-flight batching policy on plain data: no thread, no engine, no model.

Sequences are :class:`Seq` records with made-up token ids; each test hands the policy a state
(and a step's tokens) and checks its decisions and emissions. The loop that runs them on the
reference engine is tested in test_scheduler.py.
"""

from __future__ import annotations

from collections import deque

import pytest

from pdtrt.engine_io import RequestType
from pdtrt.llmapi.reference.batch_policy import Emission, Seq, State, fail, postprocess, schedule

GEN_ONLY = RequestType.GENERATION_ONLY


def _seq(name: str, prompt_len: int = 3, **kw) -> Seq:
    kw.setdefault("max_new_tokens", 8)
    return Seq(request_id=name, prompt=list(range(1, prompt_len + 1)), **kw)


def _running(name: str, **kw) -> Seq:
    """A sequence past its prefill: one token generated."""
    return _seq(name, generated=[1], **kw)


def _state(*, running=(), waiting=(), max_batch_size: int = 8, max_num_tokens: int = 64
           ) -> State:
    return State(max_batch_size=max_batch_size, max_num_tokens=max_num_tokens,
                 running=list(running), waiting=deque(waiting))


def _names(seqs) -> list[str]:
    return [s.request_id for s in seqs]


# (max_batch_size, max_num_tokens, running, waiting: prompt lengths -- "g" generation-only,
#  admitted: positions in waiting)
ADMISSION = [
    pytest.param(3, 64, 2, [1, 1, 1], [0], id="batch-size-counts-the-running"),
    pytest.param(2, 64, 2, [1], [], id="full-batch-admits-nothing"),
    pytest.param(8, 8, 0, [4, 4, 4], [0, 1], id="token-budget-exact-fit"),
    pytest.param(8, 7, 0, [4, 4], [0], id="token-budget-one-over"),
    pytest.param(8, 10, 0, [50, 1], [0], id="long-prompt-alone-then-nothing"),
    pytest.param(8, 10, 2, [50], [0], id="long-prompt-admitted-beside-running"),
    pytest.param(8, 10, 0, [4, 50, 1], [0], id="long-prompt-second-waits"),
    pytest.param(8, 6, 0, [5, 1, 1], [0, 1], id="fifo-no-overtaking"),
    pytest.param(8, 4, 0, [4, "g", 1], [0, 1], id="generation-only-costs-nothing"),
]


@pytest.mark.parametrize(("max_batch_size", "max_num_tokens", "num_running", "prompts",
                          "admitted"), ADMISSION)
def test_admission_within_max_batch_size_and_max_num_tokens(max_batch_size, max_num_tokens,
                                                            num_running, prompts, admitted):
    waiting = [_seq(f"w{i}", 5, mode=GEN_ONLY, first_tokens=(9,)) if n == "g" else
               _seq(f"w{i}", n) for i, n in enumerate(prompts)]
    running = [_running(f"r{i}") for i in range(num_running)]
    state = _state(running=running, waiting=waiting, max_batch_size=max_batch_size,
                   max_num_tokens=max_num_tokens)
    plan = schedule(state)
    expected = [f"w{i}" for i in admitted]
    assert sorted(_names(plan.prefill + plan.imported)) == expected
    assert _names(state.running) == _names(running) + expected
    assert _names(state.waiting) == [f"w{i}" for i in range(len(prompts)) if i not in admitted]


def test_admitted_sequences_prefill_in_arrival_order_and_decode_after_the_running():
    state = _state(running=[_running("r0"), _running("r1")],
                   waiting=[_seq("a", 9), _seq("b", 1), _seq("c", 5)])
    plan = schedule(state)
    assert _names(plan.prefill) == ["a", "b", "c"]
    assert _names(plan.decode) == ["r0", "r1", "a", "b", "c"]
    assert plan.emissions == () and plan.cancelled == ()


def test_cancelled_sequences_are_dropped_reported_and_free_their_slots():
    r0, r1, r2 = _running("r0"), _running("r1", cancelled=True), _running("r2")
    w0, w1 = _seq("w0", cancelled=True), _seq("w1")
    state = _state(running=[r0, r1, r2], waiting=[w0, w1], max_batch_size=3)
    plan = schedule(state)
    assert _names(plan.cancelled) == ["r1", "w0"]
    cancelled = Emission(tokens=(), final=True, cancelled=True)
    assert plan.emissions == ((r1, cancelled), (w0, cancelled))
    assert r1.done and w0.done
    assert _names(plan.decode) == ["r0", "r2", "w1"]  # the neighbour stays; w1 takes r1's slot
    assert _names(plan.prefill) == ["w1"] and not state.waiting


def test_end_id_ends_a_sequence_without_emitting_it():
    seq = _running("a", end_id=5)
    state = _state(running=[seq, _running("b")])
    assert postprocess(state, [(seq, [5])]) == [
        (seq, Emission(tokens=(), final=True, finish_reason="stop"))]
    assert seq.generated == [1] and seq.done and _names(state.running) == ["b"]


def test_end_id_among_imported_first_tokens_cuts_them_there():
    seq = _seq("g", mode=GEN_ONLY, first_tokens=(3, 5, 7), end_id=5)
    state = _state(waiting=[seq])
    plan = schedule(state)
    assert plan.emissions == ((seq, Emission(tokens=(3,), final=True, finish_reason="stop")),)
    assert plan.decode == () and not state.running


def test_max_new_tokens_ends_a_sequence():
    seq = _running("a", max_new_tokens=3)
    state = _state(running=[seq])
    assert postprocess(state, [(seq, [7])]) == [(seq, Emission(tokens=(7,), final=False))]
    assert state.running == [seq] and not seq.done
    assert postprocess(state, [(seq, [8])]) == [
        (seq, Emission(tokens=(8,), final=True, finish_reason="length"))]
    assert seq.generated == [1, 7, 8] and seq.done and not state.running


def test_a_decode_step_applies_each_sequence_its_own_token():
    a, b, c = _running("a"), _running("b", end_id=4), _running("c", max_new_tokens=2)
    state = _state(running=[a, b, c])
    out = postprocess(state, [(a, [4]), (b, [4]), (c, [4])])
    assert [(s.request_id, e.tokens, e.final) for s, e in out] == [
        ("a", (4,), False), ("b", (), True), ("c", (4,), True)]
    assert state.running == [a]


def test_context_only_ends_at_its_one_token_and_hands_back_the_kv_unless_it_hit_the_end_id():
    """The LLM forces max_tokens 1 on a context-only request (TensorRT-LLM's PyTorch flow): it
    ends "length" and hands back the prompt's KV; an end id as that token ends it "stop" with
    no KV to hand on (upstream's disaggregated server then skips the generation request)."""
    kv = object()  # the engine's, opaque to the policy
    seq, stopped = _seq("c", mode=RequestType.CONTEXT_ONLY, kv=kv, max_new_tokens=1), \
        _seq("s", mode=RequestType.CONTEXT_ONLY, kv=kv, end_id=6,
             max_new_tokens=1)
    state = _state(waiting=[seq, stopped])
    plan = schedule(state)
    assert _names(plan.prefill) == ["c", "s"]
    assert postprocess(state, [(seq, [6]), (stopped, [6])]) == [
        (seq, Emission(tokens=(6,), final=True, kv=kv, finish_reason="length")),
        (stopped, Emission(tokens=(), final=True, finish_reason="stop"))]
    assert not state.running


def test_generation_only_starts_decoding_from_its_imported_first_tokens_without_prefill():
    seq = _seq("g", 40, mode=GEN_ONLY, first_tokens=(11, 12))
    state = _state(waiting=[seq], max_num_tokens=4)  # its prompt is not prefilled: no cost
    plan = schedule(state)
    assert plan.prefill == () and plan.imported == (seq,)
    assert plan.emissions == ((seq, Emission(tokens=(11, 12), final=False)),)
    assert seq.generated == [11, 12] and plan.decode == (seq,) and state.running == [seq]
    postprocess(state, [(seq, [13])])
    assert seq.generated == [11, 12, 13]


def test_generation_only_whose_first_tokens_reach_max_new_tokens_never_decodes():
    seq = _seq("g", mode=GEN_ONLY, first_tokens=(11, 12), max_new_tokens=2)
    plan = schedule(_state(waiting=[seq]))
    assert plan.emissions == ((seq, Emission(tokens=(11, 12), final=True,
                                              finish_reason="length")),)
    assert plan.decode == () and seq.done


def test_a_failed_step_fails_the_batch_and_the_waiting_still_get_scheduled():
    a, b = _running("a"), _running("b", max_new_tokens=2)
    waiting = _seq("w")
    state = _state(running=[a, b], waiting=[waiting], max_batch_size=2)
    postprocess(state, [(b, [3])])  # b ends before the failure: no second final
    out = fail(state, "engine failure: boom")
    assert out == [(a, Emission(tokens=(), final=True, error="engine failure: boom"))]
    assert a.done and not state.running and list(state.waiting) == [waiting]
    plan = schedule(state)
    assert plan.prefill == (waiting,) and state.running == [waiting]


def test_a_stop_word_ends_a_sequence_with_the_word_in_its_output():
    seq = _running("s", stop_words=((9, 9, 9), (1, 4)))  # prompt 1 2 3, generated [1]
    state = _state(running=[seq])
    assert postprocess(state, [(seq, [4], [-0.5])]) == [
        (seq, Emission(tokens=(4,), logprobs=(-0.5,), final=True, finish_reason="stop",
                       stop_word=(1, 4)))]
    assert seq.generated == [1, 4] and state.running == []


def test_a_stop_word_may_begin_in_the_prompt_or_in_the_first_tokens_a_decode_imports():
    tail = _seq("t", stop_words=((3, 7),))  # prompt 1 2 3: the word starts in the prompt
    state = _state(running=[tail])
    assert postprocess(state, [(tail, [7])])[0][1].stop_word == (3, 7)
    # a decode whose imported first token begins the word stops at its own first token
    gen = _seq("g", mode=GEN_ONLY, first_tokens=(5,), stop_words=((5, 6),))
    state = _state(waiting=[gen])
    plan = schedule(state)
    assert plan.emissions == ((gen, Emission(tokens=(5,), final=False)),)
    assert postprocess(state, [(gen, [6])]) == [
        (gen, Emission(tokens=(6,), final=True, finish_reason="stop", stop_word=(5, 6)))]


# -- the order of the finish checks: end id, then length, then stop words (TorchSampler) -------
def test_a_context_only_token_completing_a_stop_word_ends_length_and_hands_back_the_kv():
    """TensorRT-LLM checks the length before the stop words, and a context-only request may
    have one token: that token ends it "length" even when it completes a stop word (alone, or
    with the prompt's last token), no stop word is reported, and the KV is handed back for a
    decode like any other context-only request's."""
    kv = object()
    one, two = (_seq(name, mode=RequestType.CONTEXT_ONLY, kv=kv, max_new_tokens=1,
                     stop_words=words) for name, words in (("one", ((6,),)),
                                                           ("two", ((9, 9), (3, 6)))))
    state = _state(waiting=[one, two])
    schedule(state)
    assert postprocess(state, [(one, [6]), (two, [6])]) == [
        (one, Emission(tokens=(6,), final=True, kv=kv, finish_reason="length")),
        (two, Emission(tokens=(6,), final=True, kv=kv, finish_reason="length"))]
    assert not state.running


def test_the_last_allowed_token_ends_length_even_when_it_completes_a_stop_word():
    last, earlier = _running("last", max_new_tokens=2, stop_words=((1, 4),)), \
        _running("earlier", max_new_tokens=3, stop_words=((1, 4),))  # both generated [1]
    state = _state(running=[last, earlier])
    assert postprocess(state, [(last, [4]), (earlier, [4])]) == [
        (last, Emission(tokens=(4,), final=True, finish_reason="length")),
        (earlier, Emission(tokens=(4,), final=True, finish_reason="stop", stop_word=(1, 4)))]


def test_the_end_id_comes_before_the_length_and_the_stop_words():
    seq = _running("s", max_new_tokens=2, end_id=4, stop_words=((4,),))
    state = _state(running=[seq])
    assert postprocess(state, [(seq, [4])]) == [
        (seq, Emission(tokens=(), final=True, finish_reason="stop"))]


def test_a_decode_goes_past_an_imported_first_token_that_is_a_stop_word():
    """Upstream's generation worker appends the context phase's first token outside its
    sampler's checks, so a stop word it completes ends nothing there; the decode's own tokens
    are checked (which is why pdtrt's router never sends such a decode)."""
    gen = _seq("g", mode=GEN_ONLY, first_tokens=(5,), stop_words=((5,), (3, 5)))
    state = _state(waiting=[gen])
    plan = schedule(state)
    assert plan.emissions == ((gen, Emission(tokens=(5,), final=False)),)
    assert plan.decode == (gen,) and state.running == [gen]
    assert postprocess(state, [(gen, [6])]) == [(gen, Emission(tokens=(6,), final=False))]
    assert postprocess(state, [(gen, [5])]) == [
        (gen, Emission(tokens=(5,), final=True, finish_reason="stop", stop_word=(5,)))]
