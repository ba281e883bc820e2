"""The LLM load generator behind ``pdtrt bench``: open/closed loop runs over
:class:`pdtrt.client.LLMClient`, per-request records, statistics (TTFT, ITL, TPOT, E2E,
throughput, goodput, $/Mtok, the server's TTFT by phase), reports and plots. What a workload
is -- lengths, arrivals, traces, SLOs -- is :mod:`pdtrt.workload`, shared with the simulator
and the planner; the names a benchmark is configured with are re-exported here."""

from pdtrt.bench.bench import COMPARED, BenchConfig, BenchReport, RunResult, run_bench
from pdtrt.bench.records import RequestRecord, read_csv, write_csv
from pdtrt.bench.runner import RunPlan, run_plan
from pdtrt.bench.stats import Summary, summarize
from pdtrt.bench.workload import PlannedRequest, RequestPlan
from pdtrt.workload import SLO, ArrivalProcess, LoopKind, parse_length, read_trace

__all__ = ["COMPARED", "SLO", "ArrivalProcess", "BenchConfig", "BenchReport", "LoopKind",
           "PlannedRequest", "RequestPlan", "RequestRecord", "RunPlan", "RunResult", "Summary",
           "parse_length", "read_csv", "read_trace", "run_bench", "run_plan", "summarize",
           "write_csv"]
