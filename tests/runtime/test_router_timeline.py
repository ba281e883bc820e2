"""Where a routed request's time went: the router's per-request histograms
(pdtrt.runtime.router.timeline), on the fake seam with a clock the phases move."""

from __future__ import annotations

import pytest

from tests.runtime.fake_clock import FakeClock
from tests.runtime.fake_triton import tokens_out
from tests.runtime.test_router_model import OUTPUT, PARAMS, engines, request, route


def _observed(triton, name):
    """The observations of histogram ``pdtrt_request_<name>`` as far as its series tell:
    [] when none, [sum] for one."""
    count = triton.metrics.get(f"pdtrt_request_{name}_count", 0)
    if count == 0:
        return []
    assert count == 1, f"{name}: {count} observations"
    return [triton.metrics[f"pdtrt_request_{name}_sum"]]


def test_each_phase_of_a_disaggregated_request_is_observed_once(router):
    clock = FakeClock()

    def prefill(call):
        clock.advance(0.2)  # prefill compute
        yield tokens_out(OUTPUT[0], context_phase_params=PARAMS)

    def decode(call):
        clock.advance(0.05)  # the KV pull before the first response
        yield tokens_out(OUTPUT[0])
        for t in OUTPUT[1:]:
            clock.advance(0.01)  # one decode step per token
            yield tokens_out(t)

    model, triton = router(engines(prefill=prefill, decode=decode), clock=clock)
    req = request(prompt_len=5, max_new=4)
    route(model, req)
    assert req.tokens == OUTPUT
    got = {name: _observed(triton, name) for name in (
        "queue_seconds", "prefill_seconds", "kv_transfer_seconds", "decode_seconds",
        "ttft_seconds", "tpot_seconds", "e2e_seconds", "input_tokens", "output_tokens")}
    assert all(len(v) == 1 for v in got.values()), got
    assert got["queue_seconds"] == [0.0]
    assert got["prefill_seconds"][0] == pytest.approx(0.2)
    assert got["kv_transfer_seconds"][0] == pytest.approx(0.05)
    assert got["decode_seconds"][0] == pytest.approx(0.03)  # first decode response to last
    assert got["ttft_seconds"][0] == pytest.approx(0.2)  # the prefill's token, at once
    # tokens 2..4 came 0.05 + 0.01, 0.01, 0.01 after the first: (0.08) / 3
    assert got["tpot_seconds"][0] == pytest.approx(0.08 / 3)
    assert got["e2e_seconds"][0] == pytest.approx(0.28)
    assert got["input_tokens"] == [5.0] and got["output_tokens"] == [4.0]
    # the TTFT's phases: the first token left with the prefill's answer (early_first_token),
    # so the whole TTFT is prefill; with the queue they add up to the TTFT
    phases = {p: _observed(triton, f"ttft_{p}_seconds") for p in (
        "prefill", "decode_queue", "kv_transfer", "first_decode")}
    assert phases == {"prefill": [pytest.approx(0.2)], "decode_queue": [0.0],
                      "kv_transfer": [0.0], "first_decode": [0.0]}
    assert got["queue_seconds"][0] + sum(v[0] for v in phases.values()) == \
        pytest.approx(got["ttft_seconds"][0])


def test_the_aggregated_path_has_no_phase_observations(router):
    model, triton = router(engines(), aggregated_model="aggregated",
                           aggregated_below_tokens="100")
    route(model, request(prompt_len=5))
    assert len(_observed(triton, "e2e_seconds")) == 1
    assert len(_observed(triton, "queue_seconds")) == 1
    for name in ("prefill_seconds", "kv_transfer_seconds", "decode_seconds"):
        assert _observed(triton, name) == []


def test_failed_and_cancelled_requests_are_not_observed(router):
    from tests.runtime.fake_triton import Fail

    model, triton = router(engines(decode=lambda call: [Fail("boom")]))
    route(model, request())
    cancelled = request(request_id="gone")
    cancelled.cancel()
    model2, triton2 = router(engines())
    route(model2, cancelled)
    assert _observed(triton, "e2e_seconds") == [] and _observed(triton2, "e2e_seconds") == []
    assert triton.metrics["pdtrt_router_errors_total"] == 1


def test_buckets_are_cumulative_with_an_inf_bucket(router):
    model, triton = router(engines())
    route(model, request(prompt_len=20, max_new=4))
    buckets = {k: v for k, v in triton.metrics.items()
               if k.startswith("pdtrt_request_input_tokens_bucket")}
    assert buckets["pdtrt_request_input_tokens_bucket{le=16}"] == 0
    assert buckets["pdtrt_request_input_tokens_bucket{le=32}"] == 1
    assert buckets["pdtrt_request_input_tokens_bucket{le=+Inf}"] == 1
    assert sum(buckets.values()) == 13  # 32 .. 131072 and +Inf hold the one observation


def test_histograms_are_declared_with_their_buckets():
    from pdtrt.runtime.metrics import MetricKind
    from pdtrt.runtime.router.timeline import HISTOGRAMS, LATENCY_BUCKETS_S

    assert all(spec.kind is MetricKind.HISTOGRAM and spec.buckets for spec in
               HISTOGRAMS.values())
    assert list(LATENCY_BUCKETS_S) == sorted(LATENCY_BUCKETS_S)
