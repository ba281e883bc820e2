"""The server-side breakdown of a bench run: the router's histograms, scraped around the run."""

from __future__ import annotations

import math

import pytest

from pdtrt.bench.server_side import (
    Histogram,
    MetricsProbe,
    breakdown,
    histograms,
    parse_exposition,
)
from pdtrt.errors import BenchError

BOUNDS = (0.01, 0.1, 1.0)


def _scrape(observations: dict[str, list[float]], *, instances: int = 1) -> str:
    """A Triton-like exposition: each family's counters, split over ``instances`` label
    sets (as several router instances would send them), with other metrics around."""
    lines = ["# HELP nv_inference_request_success Number of successful inference requests",
             "# TYPE nv_inference_request_success counter",
             'nv_inference_request_success{model="router",version="1"} 12']
    for family, values in observations.items():
        lines.append(f"# TYPE {family}_bucket counter")
        for k in range(instances):
            mine = values[k::instances]
            for le in (*BOUNDS, math.inf):
                n = sum(v <= le for v in mine)
                le_text = "+Inf" if math.isinf(le) else f"{le:g}"
                lines.append(f'{family}_bucket{{instance="{k}",le="{le_text}"}} {n}')
            lines.append(f'{family}_sum{{instance="{k}"}} {sum(mine)}')
            lines.append(f'{family}_count{{instance="{k}"}} {len(mine)}')
    lines.append('pdtrt_router_requests_total{model="router"} 3')
    return "\n".join(lines) + "\n"


def test_parse_skips_comments_and_keeps_labels():
    samples = parse_exposition('# HELP x y\nfoo{a="1",b="two words"} 3.5\nbar 2 1700000000\n'
                               "garbage line here\n")
    assert samples == {("foo", frozenset({("a", "1"), ("b", "two words")})): 3.5,
                       ("bar", frozenset()): 2.0}


def test_quantile_reads_buckets_like_histogram_quantile():
    # 10 observations: 4 in (0, 0.01], 4 in (0.01, 0.1], 2 in (0.1, 1]
    h = Histogram(((0.01, 4), (0.1, 8), (1.0, 10), (math.inf, 10)), sum=2.0, count=10)
    assert h.quantile(0.2) == pytest.approx(0.005)  # rank 2 of 4 in the first bucket, from 0
    assert h.quantile(0.5) == pytest.approx(0.01 + 0.09 * 0.25)
    assert h.quantile(0.9) == pytest.approx(0.1 + 0.9 * 0.5)
    assert h.mean == pytest.approx(0.2)
    over = Histogram(((0.01, 0), (math.inf, 3)), sum=30.0, count=3)
    assert over.quantile(0.5) == 0.01  # in +Inf: the highest finite bound, as Prometheus
    assert Histogram(((0.01, 0), (math.inf, 0)), 0.0, 0).quantile(0.5) is None


def test_the_run_is_the_difference_of_two_scrapes_summed_over_instances():
    warmup = [0.5, 0.5]
    run = [0.005, 0.005, 0.05, 0.05, 0.05, 0.5]
    before = histograms(parse_exposition(_scrape({"pdtrt_request_ttft_seconds": warmup},
                                                 instances=2)))
    after = histograms(parse_exposition(_scrape(
        {"pdtrt_request_ttft_seconds": warmup + run,
         "pdtrt_request_output_tokens": [8.0] * 8}, instances=2)))
    assert set(after) == {"pdtrt_request_ttft_seconds", "pdtrt_request_output_tokens"}
    b = breakdown(before, after, url="http://x/metrics")
    ttft = b.get("ttft")
    assert ttft is not None and ttft.count == 6 and ttft.unit == "seconds"
    assert ttft.mean == pytest.approx(sum(run) / 6)  # the warm-up's 0.5 s are gone
    assert ttft.p50 == pytest.approx(0.01 + 0.09 * (3 - 2) / 3)
    out = b.get("output_tokens")
    assert out is not None and out.count == 8 and out.unit == "tokens" and out.mean == 8.0
    assert b.note is None and b.to_dict()["families"][0]["family"] == "pdtrt_request_ttft_seconds"


def test_a_run_the_router_did_not_see_says_so():
    same = histograms(parse_exposition(_scrape({"pdtrt_request_ttft_seconds": [0.1]})))
    b = breakdown(same, same)
    assert b.families == () and "does not pass through pdtrt's router" in b.note


def test_the_probe_waits_for_the_flush_and_survives_a_failed_scrape():
    pages = [_scrape({"pdtrt_request_e2e_seconds": []}),
             _scrape({"pdtrt_request_e2e_seconds": [0.05, 0.2]})]
    slept = []
    probe = MetricsProbe("http://m/metrics", fetch=lambda url, t: pages.pop(0),
                         sleep=slept.append, settle_s=0.4)
    probe.start()
    result = probe.stop()
    assert slept == [0.4, 0.4] and result.get("e2e").count == 2

    def refused(url, timeout_s):
        raise BenchError(f"cannot scrape {url}: refused")

    broken = MetricsProbe("http://m/metrics", fetch=refused, sleep=lambda s: None)
    with pytest.raises(BenchError, match="refused"):
        broken.check()
    broken.start()
    assert broken.stop().note == "cannot scrape http://m/metrics: refused"


def test_an_unreachable_url_is_a_bench_error_with_a_hint():
    probe = MetricsProbe("http://127.0.0.1:9/metrics", timeout_s=2)
    with pytest.raises(BenchError) as info:
        probe.check()
    assert "cannot scrape http://127.0.0.1:9/metrics" in info.value.message
    assert "metrics endpoint" in info.value.hint
