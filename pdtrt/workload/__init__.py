"""One workload vocabulary for ``pdtrt bench``, ``pdtrt simulate`` and ``pdtrt plan``.

- :mod:`~pdtrt.workload.lengths`: prompt/output length distributions (``N``,
  ``uniform:LOW:HIGH``, ``normal:MEAN:STD``);
- :mod:`~pdtrt.workload.arrivals`: open/closed loop and the seeded arrival generator (first
  arrival at t = 0);
- :mod:`~pdtrt.workload.trace`: the JSONL (or CSV) trace reader;
- :mod:`~pdtrt.workload.request_mix`: request *i*'s lengths, seeded per request;
- :mod:`~pdtrt.workload.conversation`: a chat workload's shape (shared system prompt, turns,
  think time) and what block reuse leaves to compute of it;
- :mod:`~pdtrt.workload.latency`: a latency distribution as reported (ms percentiles);
- :mod:`~pdtrt.workload.slo`: SLO targets and the one definition of attainment, goodput and
  "meets the SLO" (DistServe's, per request).

What a workload *is* lives here; sending it to a server (:mod:`pdtrt.bench`) and simulating it
(:mod:`pdtrt.sim`) do not.
"""

from pdtrt.workload.arrivals import (
    ArrivalProcess,
    LoopKind,
    arrival_rng,
    arrival_times_s,
)
from pdtrt.workload.conversation import ConversationShape
from pdtrt.workload.latency import Dist
from pdtrt.workload.lengths import LengthDist, LengthKind, parse_length
from pdtrt.workload.request_mix import RequestDraw, RequestMix, request_rng, word_count
from pdtrt.workload.slo import SLO, RequestOutcome, SloReport, evaluate_slo
from pdtrt.workload.trace import TraceEntry, read_trace

__all__ = ["SLO", "ArrivalProcess", "ConversationShape", "Dist", "LengthDist", "LengthKind",
           "LoopKind", "RequestDraw", "RequestMix", "RequestOutcome", "SloReport", "TraceEntry",
           "arrival_rng", "arrival_times_s", "evaluate_slo", "parse_length", "read_trace",
           "request_rng", "word_count"]
