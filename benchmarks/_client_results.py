"""One load as pdtrt bench and another client report it, side by side (client_crosscheck.py).

Reads ``pdtrt bench``'s ``report.json`` and the summary JSON of genai-perf
(``profile_export_genai_perf.json``) or aiperf (``profile_export_aiperf.json``: aiperf's
``JsonExportData`` keeps genai-perf's shape on purpose -- a top-level object per metric with
``unit``, ``avg``, ``p50`` ...), and the router's histograms scraped from Triton's metrics port
before and after each run (:class:`ServerCounts`). The figures, one definition for all three:

- **TTFT** p50 and mean: send -> first token, per request.
- **ITL**: per request (E2E - TTFT) / (output tokens - 1), averaged over requests --
  pdtrt's TPOT, genai-perf's and aiperf's ``inter_token_latency``.
- **output tok/s**: output tokens of the measured requests / the measurement window.

Token counts: pdtrt bench counts streamed responses (one per engine token); aiperf with
``--use-server-token-count`` reads the OpenAI ``usage`` (the engine's count); genai-perf
re-tokenizes the text it received with its tokenizer, which need not give the engine's count.
So every run's tok/s and ITL are also given **on the server's count**: the router's
``pdtrt_request_output_tokens`` over the run (mean tokens per request) times the client's
requests/s, and the ITL scaled by (client tokens - 1) / (server tokens - 1) -- exact when every
request has the same length (``--ignore-eos``, ``end_id`` -1), which the cross-check uses. The
server's count includes the run's warm-up requests; with fixed lengths that changes no mean.
Nothing here runs a process or does network I/O: client_crosscheck.py does.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TOLERANCE = 0.10  # the bar: TTFT p50 and tok/s within 10 % of pdtrt bench's
COMPARED = ("ttft_p50_ms", "output_tok_per_s")  # the figures the bar applies to


@dataclass(frozen=True, kw_only=True)
class ServerCounts:
    """The router's histograms over one run (the difference of two scrapes)."""

    requests: float  # pdtrt_request_output_tokens_count
    output_tokens: float  # ..._sum
    input_tokens: float  # pdtrt_request_input_tokens_sum
    ttft_s: float  # pdtrt_request_ttft_seconds_sum

    @property
    def output_per_request(self) -> float | None:
        return self.output_tokens / self.requests if self.requests else None

    @property
    def input_per_request(self) -> float | None:
        return self.input_tokens / self.requests if self.requests else None

    @property
    def ttft_mean_ms(self) -> float | None:
        return 1000.0 * self.ttft_s / self.requests if self.requests else None


_SCRAPED = {"requests": "pdtrt_request_output_tokens_count",
            "output_tokens": "pdtrt_request_output_tokens_sum",
            "input_tokens": "pdtrt_request_input_tokens_sum",
            "ttft_s": "pdtrt_request_ttft_seconds_sum"}
_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", re.M)


def scrape_totals(text: str) -> dict[str, float]:
    """The totals (over every label set) of the series :class:`ServerCounts` needs, from a
    Prometheus text page."""
    totals = dict.fromkeys(_SCRAPED, 0.0)
    wanted = {name: key for key, name in _SCRAPED.items()}
    for name, _, value in _SERIES.findall(text):
        if name in wanted:
            totals[wanted[name]] += float(value)
    return totals


def server_counts(before: dict[str, float], after: dict[str, float]) -> ServerCounts:
    return ServerCounts(**{key: after[key] - before[key] for key in _SCRAPED})


@dataclass(frozen=True, kw_only=True)
class ClientRun:
    """One client's figures of one run (ms, tokens, per second)."""

    client: str
    num_ok: int
    num_errors: int
    ttft_p50_ms: float
    ttft_mean_ms: float
    itl_mean_ms: float
    e2e_mean_ms: float
    output_tok_per_s: float
    request_per_s: float
    input_tokens_mean: float  # as the client counted them
    output_tokens_mean: float
    server: ServerCounts | None = None
    client_cpu_s: float | None = None  # CPU seconds of the client's processes (the script's)

    def on_server_counts(self) -> dict[str, float | None]:
        """tok/s and ITL on the server's output-token count (None: no server counts)."""
        n_server = self.server.output_per_request if self.server else None
        if n_server is None:
            return {"output_tok_per_s": None, "itl_mean_ms": None}
        itl = (self.itl_mean_ms * (self.output_tokens_mean - 1) / (n_server - 1)
               if n_server > 1 else None)
        return {"output_tok_per_s": self.request_per_s * n_server, "itl_mean_ms": itl}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["server"] = None if self.server is None else {
            **asdict(self.server), "output_per_request": self.server.output_per_request,
            "input_per_request": self.server.input_per_request,
            "ttft_mean_ms": self.server.ttft_mean_ms}
        out["on_server_counts"] = self.on_server_counts()
        return out


def read_pdtrt(report: Path, server: ServerCounts | None = None) -> ClientRun:
    """``pdtrt bench --json`` / ``report.json`` of a one-run benchmark."""
    [run] = json.loads(report.read_text())["runs"]
    s = run["summary"]
    ok = s["num_ok"]
    return ClientRun(client="pdtrt bench", num_ok=ok, num_errors=s["num_errors"],
                     ttft_p50_ms=s["ttft_ms"]["p50"], ttft_mean_ms=s["ttft_ms"]["mean"],
                     itl_mean_ms=s["tpot_ms"]["mean"], e2e_mean_ms=s["e2e_ms"]["mean"],
                     output_tok_per_s=s["output_tok_per_s"], request_per_s=s["request_per_s"],
                     input_tokens_mean=s["input_tokens"] / ok if ok else math.nan,
                     output_tokens_mean=s["output_tokens"] / ok if ok else math.nan,
                     server=server)


def _avg(data: dict[str, Any], key: str, stat: str = "avg") -> float:
    metric = data.get(key)
    value = metric.get(stat) if isinstance(metric, dict) else None
    return math.nan if value is None else float(value)


def read_profile_export(path: Path, client: str, *, num_sent: int,
                        server: ServerCounts | None = None) -> ClientRun:
    """genai-perf's or aiperf's summary JSON. ``num_sent``: measured requests the run sent
    (genai-perf counts no errors: perf_analyzer fails the run on one; aiperf reports
    ``request_count`` and ``error_request_count``)."""
    data = json.loads(path.read_text())
    count = _avg(data, "request_count")
    errors = _avg(data, "error_request_count")
    num_errors = 0 if math.isnan(errors) else int(errors)
    num_ok = num_sent - num_errors if math.isnan(count) else int(count)
    return ClientRun(client=client, num_ok=num_ok, num_errors=num_errors,
                     ttft_p50_ms=_avg(data, "time_to_first_token", "p50"),
                     ttft_mean_ms=_avg(data, "time_to_first_token"),
                     itl_mean_ms=_avg(data, "inter_token_latency"),
                     e2e_mean_ms=_avg(data, "request_latency"),
                     output_tok_per_s=_avg(data, "output_token_throughput"),
                     request_per_s=_avg(data, "request_throughput"),
                     input_tokens_mean=_avg(data, "input_sequence_length"),
                     output_tokens_mean=_avg(data, "output_sequence_length"),
                     server=server)


def _tok_per_s(run: ClientRun) -> float:
    """Output tok/s on the server's count where there is one, else the client's."""
    on_server = run.on_server_counts()["output_tok_per_s"]
    return run.output_tok_per_s if on_server is None else on_server


@dataclass(frozen=True, kw_only=True)
class Pair:
    """pdtrt bench and one client on the same load, run back to back."""

    index: int
    pdtrt: ClientRun
    other: ClientRun

    def ratios(self) -> dict[str, float]:
        """other / pdtrt for the compared figures (tok/s on the server's counts)."""
        return {"ttft_p50_ms": self.other.ttft_p50_ms / self.pdtrt.ttft_p50_ms,
                "output_tok_per_s": _tok_per_s(self.other) / _tok_per_s(self.pdtrt)}

    def within(self, tolerance: float = TOLERANCE) -> bool:
        return all(abs(r - 1.0) <= tolerance for r in self.ratios().values())

    def to_dict(self) -> dict[str, Any]:
        return {"pair": self.index, "pdtrt": self.pdtrt.to_dict(), "other": self.other.to_dict(),
                "ratios": self.ratios(), "within_10_percent": self.within()}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _rows(run: ClientRun) -> list[str]:
    srv = run.on_server_counts()
    counted = f"{_fmt(run.input_tokens_mean)} / {_fmt(run.output_tokens_mean)}"
    server = (f"{_fmt(run.server.input_per_request)} / {_fmt(run.server.output_per_request)}"
              if run.server else "-")
    return [f"{run.num_ok}/{run.num_ok + run.num_errors}", _fmt(run.ttft_p50_ms),
            _fmt(run.ttft_mean_ms), _fmt(run.itl_mean_ms, 2), _fmt(srv["itl_mean_ms"], 2),
            _fmt(run.e2e_mean_ms), _fmt(run.output_tok_per_s), _fmt(srv["output_tok_per_s"]),
            counted, server, _fmt(run.server.ttft_mean_ms if run.server else None),
            _fmt(run.client_cpu_s)]


HEADER = ("| pair | client | ok | TTFT p50 (ms) | TTFT mean (ms) | ITL mean (ms) | "
          "ITL mean, server count (ms) | E2E mean (ms) | output tok/s | "
          "output tok/s, server count | tokens in / out per request (client) | "
          "tokens in / out per request (server) | router TTFT mean (ms) | client CPU (s) | "
          "other / pdtrt: TTFT p50, tok/s |")


def markdown(pairs: list[Pair]) -> str:
    """The pairs as one markdown table: pdtrt bench's row, then the client's with its ratios."""
    lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    for pair in pairs:
        r = pair.ratios()
        verdict = (f"{r['ttft_p50_ms']:.3f}, {r['output_tok_per_s']:.3f} "
                   f"({'within' if pair.within() else 'NOT within'} 10 %)")
        lines.append("| " + " | ".join([str(pair.index), pair.pdtrt.client,
                                        *_rows(pair.pdtrt), ""]) + " |")
        lines.append("| " + " | ".join([str(pair.index), pair.other.client,
                                        *_rows(pair.other), verdict]) + " |")
    return "\n".join(lines) + "\n"


def summary(pairs: list[Pair]) -> dict[str, Any]:
    return {"pairs": [p.to_dict() for p in pairs],
            "all_within_10_percent": all(p.within() for p in pairs)}
