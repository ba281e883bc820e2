"""The reference engine and its in-flight batching scheduler against transformers generate()."""

from __future__ import annotations

import queue
import threading

import pytest

from pdtrt.engine_io import RequestType
from tests.runtime.conftest import hf_greedy

PROMPTS = [[5, 6, 7, 8, 9], [1, 2, 3], [100, 200, 300, 400, 10, 11, 12, 13], [42] * 40]


@pytest.fixture
def scheduler(tiny_model):
    from pdtrt.llmapi.reference.engine import ReferenceEngine
    from pdtrt.llmapi.reference.scheduler import Scheduler

    sched = Scheduler(ReferenceEngine(tiny_model, tokens_per_block=16), max_batch_size=8,
                      max_num_tokens=64)
    sched.start()
    yield sched
    sched.stop()


def _submit(sched, prompt, n, *, mode=RequestType.CONTEXT_AND_GENERATION, **kw):
    from pdtrt.llmapi.reference.engine import SequenceSampling
    from pdtrt.llmapi.reference.scheduler import SeqRequest

    out: queue.Queue = queue.Queue()
    sched.submit(SeqRequest(request_id=str(id(out)), prompt=prompt, max_new_tokens=n,
                            end_id=kw.pop("end_id", None), sampling=kw.pop("sampling",
                            SequenceSampling()), mode=mode, emit=out.put, **kw))
    return out


def _collect(out):
    tokens = []
    while True:
        em = out.get(timeout=60)
        tokens += em.tokens
        if em.final:
            return tokens, em


def test_concurrent_greedy_equals_generate(scheduler, tiny_model):
    outs = [_submit(scheduler, p, 12) for p in PROMPTS]
    results = [_collect(o)[0] for o in outs]
    assert results == [hf_greedy(tiny_model, p, 12) for p in PROMPTS]
    assert scheduler.max_batch_seen > 1  # the sequences were decoded together


def test_prefill_then_decode_via_packed_kv(scheduler, tiny_model):
    from pdtrt.llmapi.reference.engine import pack_kv, unpack_kv

    for prompt in PROMPTS:
        tokens, final = _collect(_submit(scheduler, prompt, 1, mode=RequestType.CONTEXT_ONLY))
        assert len(tokens) == 1 and final.kv is not None
        kv = unpack_kv(pack_kv(final.kv), scheduler.engine.layout, len(prompt))
        rest, _ = _collect(_submit(scheduler, prompt, 10, mode=RequestType.GENERATION_ONLY,
                                   imported_kv=kv, first_tokens=tuple(tokens)))
        assert rest == hf_greedy(tiny_model, prompt, 10)  # first token included again


def test_end_id_stops_without_emitting_it(scheduler, tiny_model):
    ref = hf_greedy(tiny_model, PROMPTS[0], 12)
    tokens, _ = _collect(_submit(scheduler, PROMPTS[0], 12, end_id=ref[3]))
    assert tokens == ref[:ref.index(ref[3])]


def test_seeded_sampling_is_reproducible(scheduler):
    from pdtrt.llmapi.reference.engine import SequenceSampling

    params = SequenceSampling(greedy=False, temperature=0.9, top_k=50, top_p=0.9, seed=7)
    a = _collect(_submit(scheduler, PROMPTS[1], 16, sampling=params))[0]
    b = _collect(_submit(scheduler, PROMPTS[1], 16, sampling=params))[0]
    c = _collect(_submit(scheduler, PROMPTS[1], 16, sampling=SequenceSampling(
        greedy=False, temperature=0.9, top_k=50, top_p=0.9, seed=8)))[0]
    assert a == b and len(a) == 16 and a != c


def test_cancel_mid_stream(scheduler):
    stop = threading.Event()
    out = _submit(scheduler, PROMPTS[0], 400, is_cancelled=stop.is_set)
    first = out.get(timeout=30)
    assert first.tokens and not first.final
    stop.set()
    tokens, final = _collect(out)
    assert final.cancelled and len(tokens) < 399
    assert scheduler.num_active == 0


CONTINUED = {  # sampling of a request the router migrates: what must carry over exactly
    "greedy-penalties": dict(repetition_penalty=1.3, presence_penalty=0.5,
                             frequency_penalty=0.2),
    "seeded": dict(greedy=False, temperature=0.9, top_k=50, top_p=0.9, seed=7),
    "seeded-penalties-min-tokens": dict(greedy=False, temperature=1.2, seed=11,
                                        repetition_penalty=1.2, frequency_penalty=0.3,
                                        min_tokens=12),
}


@pytest.mark.parametrize("sampling", list(CONTINUED.values()), ids=list(CONTINUED))
def test_a_continuation_from_the_output_so_far_generates_the_rest_of_it(scheduler, sampling):
    """The router's migration: the prompt followed by the first ``k`` output tokens, for the
    rest of the tokens (``min_tokens`` less ``k``), draws and penalises exactly as the
    uninterrupted request did -- seeded draws are keyed by the position in the sequence."""
    from dataclasses import replace

    from pdtrt.llmapi.reference.engine import SequenceSampling

    params = SequenceSampling(**sampling)
    whole = _collect(_submit(scheduler, PROMPTS[2], 16, sampling=params, end_id=2))[0]
    assert len(whole) == 16
    for k in (1, 5):
        rest = _collect(_submit(scheduler, PROMPTS[2] + whole[:k], 16 - k, end_id=2,
                                sampling=replace(params, min_tokens=max(
                                    0, params.min_tokens - k))))[0]
        assert whole[:k] + rest == whole, k
