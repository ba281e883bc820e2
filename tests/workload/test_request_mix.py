"""Request i: seeded per index, independent of everything else, traces cycled."""

from __future__ import annotations

from pdtrt.workload import LengthDist, RequestMix, TraceEntry, parse_length, request_rng


def test_request_i_is_seeded_per_index_and_seed():
    mix = RequestMix(isl=parse_length("uniform:5:5000"), osl=parse_length("normal:100:30"),
                     seed=3)
    a = mix.draw(4)
    assert a == mix.draw(4) == mix.draw(4, request_rng(3, 4))
    assert a != mix.draw(5)
    assert a != RequestMix(isl=mix.isl, osl=mix.osl, seed=4).draw(4)
    assert 5 <= a.isl <= 5000 and 1 <= a.osl <= mix.osl.high and a.prompt is None


def test_lengths_do_not_depend_on_what_else_is_drawn():
    mix = RequestMix(isl=parse_length("uniform:1:100"), osl=parse_length("uniform:1:100"))
    rng = request_rng(0, 7)
    first = mix.draw(7, rng)
    rng.integers(0, 10, size=50)  # a caller keeps drawing (bench's prompt words)
    assert mix.draw(7) == first


def test_trace_entries_are_cycled_and_missing_lengths_drawn():
    trace = (TraceEntry(prompt="one two three", osl=4), TraceEntry(isl=50),
             TraceEntry(arrival_s=2.0, isl=9, osl=1))
    mix = RequestMix(isl=LengthDist.fixed(1), osl=parse_length("uniform:10:20"), seed=1,
                     trace=trace)
    draws = [mix.draw(i) for i in range(4)]
    assert [(d.isl, d.prompt) for d in draws] == [(3, "one two three"), (50, None), (9, None),
                                                 (3, "one two three")]
    assert draws[0].osl == 4 and 10 <= draws[1].osl <= 20 and draws[2].arrival_s == 2.0
    assert mix.draw(0, count=lambda text: 99).isl == 99  # the caller's token counter
    assert (mix.max_isl, mix.max_osl) == (50, 20)


def test_max_lengths_bound_every_draw():
    mix = RequestMix(isl=parse_length("normal:100:40"), osl=parse_length("uniform:3:9"))
    draws = [mix.draw(i) for i in range(300)]
    assert max(d.isl for d in draws) <= mix.max_isl == 260
    assert max(d.osl for d in draws) <= mix.max_osl == 9
