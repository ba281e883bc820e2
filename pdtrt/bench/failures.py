"""What failed in a benchmark run: counts by kind, the most common error, and the error a run
raises when every measured request failed.

A benchmark whose requests all failed measured nothing, so ``pdtrt bench`` must not exit 0
after it (the report is still written, it shows what went wrong); a run with some failures
reports how many, by kind, beside its numbers. Warm-up requests are left out, like everywhere
in the statistics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from pdtrt.bench.records import RequestRecord
from pdtrt.client.types import ErrorKind
from pdtrt.errors import BenchError

__all__ = ["Failures", "all_failed_error"]

_HINTS: dict[str, str] = {  # by ErrorKind (a StrEnum: its values look them up)
    ErrorKind.REQUEST: "the server refused the requests: check --isl/--osl against the "
    "deployment's limits (or pass --tokenizer DIR so lengths are in its tokens)",
    ErrorKind.TIMEOUT: "no request finished in time: raise --timeout or lower the load",
    ErrorKind.UNAVAILABLE: "the server stopped answering: check that it is up (pdtrt serve)",
    ErrorKind.CANCELLED: "every request was cancelled",
}


@dataclass(frozen=True, kw_only=True)
class Failures:
    """The failed measured requests of one run."""

    num_measured: int
    num_failed: int
    by_kind: dict[str, int]  # ErrorKind value (or "unknown") -> count, most frequent first
    most_common_error: str | None  # the most frequent message, None without failures

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> Failures:
        measured = [r for r in records if not r.warmup]
        failed = [r for r in measured if not r.ok]
        kinds = Counter(str(r.error_kind or "unknown") for r in failed)
        messages = Counter(r.error for r in failed)
        return cls(num_measured=len(measured), num_failed=len(failed),
                   by_kind=dict(kinds.most_common()),
                   most_common_error=messages.most_common(1)[0][0] if failed else None)

    @property
    def all_failed(self) -> bool:
        return self.num_measured > 0 and self.num_failed == self.num_measured

    def describe(self) -> str:
        """``3 of 20 requests failed (request 2, timeout 1)``."""
        kinds = ", ".join(f"{kind} {n}" for kind, n in self.by_kind.items())
        return f"{self.num_failed} of {self.num_measured} requests failed ({kinds})"

    def to_dict(self) -> dict[str, object]:
        return {"num_measured": self.num_measured, "num_failed": self.num_failed,
                "by_kind": self.by_kind, "most_common_error": self.most_common_error}


def all_failed_error(failed: dict[str, Failures]) -> BenchError | None:
    """The error for runs (label -> failures) whose every request failed; None if none did."""
    dead = {label: f for label, f in failed.items() if f.all_failed}
    if not dead:
        return None
    label, first = next(iter(dead.items()))
    kind = next(iter(first.by_kind))
    others = f" (and {len(dead) - 1} more run(s))" if len(dead) > 1 else ""
    return BenchError(
        f"every request of {label} failed{others}; most common error ({kind}, "
        f"{first.by_kind[kind]} of {first.num_measured}): {first.most_common_error}",
        hint=_HINTS.get(kind, "see the per-request records (records-*.csv)"))
