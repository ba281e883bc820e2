"""The record of requests lost with a dead router, between the supervisor and the reload."""

from __future__ import annotations

from pdtrt.runtime.router.reload_losses import (
    LOST_FILE,
    in_flight,
    read_lost,
    record_lost,
    reset_lost,
)


def test_the_in_flight_gauge_is_read_for_one_router_only():
    page = ('# HELP pdtrt_router_requests_in_flight Requests being routed now\n'
            'pdtrt_router_requests_in_flight{model="router_b"} 7\n'
            'pdtrt_router_requests_in_flight{model="router"} 2\n'
            'pdtrt_router_requests_total{model="router"} 40\n')
    assert in_flight(page, "router") == 2 and in_flight(page, "router_b") == 7
    assert in_flight(page, "other") is None and in_flight("", "router") is None


def test_losses_add_up_and_a_broken_record_counts_as_none(tmp_path):
    assert read_lost(tmp_path) == 0
    assert record_lost(tmp_path, 3) == 3 and record_lost(tmp_path, 2) == 5
    assert read_lost(tmp_path) == 5 and not list(tmp_path.glob(".*.tmp"))
    (tmp_path / LOST_FILE).write_text("{half")
    assert read_lost(tmp_path) == 0
    reset_lost(tmp_path)
    reset_lost(tmp_path)  # nothing to forget: fine
    assert not (tmp_path / LOST_FILE).exists()
