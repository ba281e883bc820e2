"""Per-request records of a benchmark run, and their CSV form.

Times are seconds from the start of the measured run (monotonic clock). ``token_times_s`` are
the receive times of the streamed responses -- one per token, unless the server's
``stream_interval`` puts several tokens in one; ``tokens_per_response`` then says how many each
held (the model's ``num_output_tokens``; empty: one each, and in files from before the column),
``output_tokens`` is their sum and the inter-token latencies spread each response's gap over
its tokens (:func:`pdtrt.client.types.token_gaps_s`). A warm-up request has ``warmup`` set and
negative times; the statistics leave it out.

``server_timing`` is the server's own account of the request's TTFT when the model answers it
(pdtrt's disaggregated ``ensemble``; :mod:`pdtrt.client.timing`): the CSV columns
``server_ttft_ms`` and the five phases that sum to it (:data:`SERVER_TIMING_FIELDS`), on the
router's clock, empty for a request without one.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from pdtrt.client.timing import TTFT_PHASE_FIELDS, ServerTiming
from pdtrt.client.types import ErrorKind, token_gaps_s

__all__ = ["CSV_FIELDS", "SERVER_TIMING_FIELDS", "RequestRecord", "read_csv", "write_csv"]


@dataclass(frozen=True, kw_only=True)
class RequestRecord:
    index: int
    model: str
    request_id: str
    warmup: bool
    scheduled_s: float | None  # open loop: the planned arrival; closed loop: None
    send_s: float
    token_times_s: tuple[float, ...]  # of each response
    end_s: float
    input_tokens: int
    max_tokens: int
    error: str | None = None
    error_kind: ErrorKind | None = None
    conversation: str | None = None  # a multi-turn trace's conversation id
    turn: int | None = None  # 0: the conversation's first turn
    server_timing: ServerTiming | None = None  # the server's TTFT and its phases, if answered
    tokens_per_response: tuple[int, ...] = ()  # of each response; empty: one each

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def output_tokens(self) -> int:
        return sum(self.tokens_per_response) if self.tokens_per_response \
            else len(self.token_times_s)

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] - self.send_s if self.token_times_s else None

    @property
    def itls_s(self) -> tuple[float, ...]:
        """Per token: each response's gap spread over its tokens (``token_gaps_s``)."""
        return token_gaps_s(self.token_times_s, self.tokens_per_response)

    @property
    def tpot_s(self) -> float | None:
        """(last token - first token) / (output tokens - 1) -- the tokens after the first
        response, which holds one (TensorRT-LLM answers the first token alone); the mean of
        :attr:`itls_s`. None below 2 responses."""
        t, first = self.token_times_s, (self.tokens_per_response or (1,))[0]
        after = self.output_tokens - first
        return (t[-1] - t[0]) / after if len(t) >= 2 and after > 0 else None

    @property
    def e2e_s(self) -> float:
        return self.end_s - self.send_s

    @property
    def lag_s(self) -> float | None:
        """How late the request was sent against its schedule (open loop)."""
        return None if self.scheduled_s is None else self.send_s - self.scheduled_s


SERVER_TIMING_FIELDS = ("server_ttft_ms", *TTFT_PHASE_FIELDS)
"""The server's TTFT, then the five phases that sum to it (ms, the router's clock)."""

CSV_FIELDS = ("index", "model", "request_id", "warmup", "scheduled_s", "send_s",
              "first_token_s", "end_s", "input_tokens", "max_tokens", "output_tokens",
              "ttft_ms", "tpot_ms", "e2e_ms", "error", "error_kind", "token_times_s",
              "conversation", "turn", *SERVER_TIMING_FIELDS, "server_path",
              "tokens_per_response")


def _timing_cells(timing: ServerTiming | None) -> dict[str, object]:
    if timing is None:
        return dict.fromkeys((*SERVER_TIMING_FIELDS, "server_path"), "")
    values = (timing.ttft_ms, *timing.phases_ms.values())
    return {**{name: f"{v:.3f}" for name, v in zip(SERVER_TIMING_FIELDS, values, strict=True)},
            "server_path": timing.path}


def _timing_of(row: dict[str, str]) -> ServerTiming | None:
    """The server timing of a CSV row (None: empty, or a file from before the columns)."""
    if not row.get("server_ttft_ms"):
        return None
    return ServerTiming(ttft_ms=float(row["server_ttft_ms"]),
                        **{name: float(row[name]) for name in TTFT_PHASE_FIELDS},
                        path=row.get("server_path") or "")


def _row(r: RequestRecord) -> dict[str, object]:
    return {
        "index": r.index, "model": r.model, "request_id": r.request_id, "warmup": int(r.warmup),
        "scheduled_s": "" if r.scheduled_s is None else f"{r.scheduled_s:.6f}",
        "send_s": f"{r.send_s:.6f}",
        "first_token_s": f"{r.token_times_s[0]:.6f}" if r.token_times_s else "",
        "end_s": f"{r.end_s:.6f}", "input_tokens": r.input_tokens, "max_tokens": r.max_tokens,
        "output_tokens": r.output_tokens,
        "ttft_ms": "" if r.ttft_s is None else f"{r.ttft_s * 1e3:.3f}",
        "tpot_ms": "" if r.tpot_s is None else f"{r.tpot_s * 1e3:.3f}",
        "e2e_ms": f"{r.e2e_s * 1e3:.3f}", "error": r.error or "",
        "error_kind": r.error_kind or "",
        "token_times_s": json.dumps([round(t, 6) for t in r.token_times_s]),
        "conversation": r.conversation or "", "turn": "" if r.turn is None else r.turn,
        **_timing_cells(r.server_timing),
        "tokens_per_response": json.dumps(list(r.tokens_per_response))
        if r.tokens_per_response else "",
    }


def write_csv(records: list[RequestRecord], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for record in records:
            writer.writerow(_row(record))
    return path


def read_csv(path: Path) -> list[RequestRecord]:
    with path.open(newline="") as f:
        return [RequestRecord(
            index=int(row["index"]), model=row["model"], request_id=row["request_id"],
            warmup=row["warmup"] == "1",
            scheduled_s=float(row["scheduled_s"]) if row["scheduled_s"] else None,
            send_s=float(row["send_s"]), token_times_s=tuple(json.loads(row["token_times_s"])),
            end_s=float(row["end_s"]), input_tokens=int(row["input_tokens"]),
            max_tokens=int(row["max_tokens"]), error=row["error"] or None,
            error_kind=ErrorKind(row["error_kind"]) if row["error_kind"] else None,
            conversation=row.get("conversation") or None,  # absent from older files
            turn=int(row["turn"]) if row.get("turn") else None,
            server_timing=_timing_of(row),
            tokens_per_response=tuple(json.loads(row["tokens_per_response"]))
            if row.get("tokens_per_response") else ())  # absent from older files
            for row in csv.DictReader(f)]
