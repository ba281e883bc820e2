"""Failure accounting of a benchmark run: counts by kind, most common error, exit error."""

from __future__ import annotations

from pdtrt.bench.failures import Failures, all_failed_error
from pdtrt.bench.records import RequestRecord
from pdtrt.client.types import ErrorKind


def _rec(i: int, error: str | None = None, kind: ErrorKind | None = None,
         warmup: bool = False) -> RequestRecord:
    return RequestRecord(index=i, model="m", request_id=str(i), warmup=warmup, scheduled_s=None,
                         send_s=0.0, token_times_s=() if error else (0.1,), end_s=0.2,
                         input_tokens=1, max_tokens=1, error=error, error_kind=kind)


def test_counts_by_kind_most_frequent_first_without_warmup():
    f = Failures.of([_rec(0, "boom", ErrorKind.REQUEST, warmup=True), _rec(1),
                     _rec(2, "slow", ErrorKind.TIMEOUT), _rec(3, "too long", ErrorKind.REQUEST),
                     _rec(4, "too long", ErrorKind.REQUEST), _rec(5, "?")])
    assert (f.num_measured, f.num_failed) == (5, 4)
    assert list(f.by_kind.items()) == [("request", 2), ("timeout", 1), ("unknown", 1)]
    assert f.most_common_error == "too long" and not f.all_failed
    assert f.describe() == "4 of 5 requests failed (request 2, timeout 1, unknown 1)"


def test_only_a_run_whose_every_request_failed_is_an_error():
    ok = Failures.of([_rec(0), _rec(1, "x", ErrorKind.REQUEST)])
    dead = Failures.of([_rec(0, "gone", ErrorKind.UNAVAILABLE)] * 3)
    assert all_failed_error({"a": ok}) is None
    assert all_failed_error({"a": Failures.of([])}) is None  # nothing measured, nothing failed
    err = all_failed_error({"a": ok, "b @ rate 2/s": dead})
    assert err is not None
    assert err.message == ("every request of b @ rate 2/s failed; most common error "
                           "(unavailable, 3 of 3): gone")
    assert "is up" in err.hint
