"""The LLM load generator behind ``pdtrt bench``: workloads, arrival processes, open/closed
loop runs over :class:`pdtrt.client.LLMClient`, per-request records, statistics (TTFT, ITL,
TPOT, E2E, throughput, goodput, $/Mtok), reports and plots."""

from pdtrt.bench.arrivals import ArrivalProcess, arrival_times_s
from pdtrt.bench.bench import COMPARED, BenchConfig, BenchReport, RunResult, run_bench
from pdtrt.bench.lengths import LengthDist, LengthKind, parse_length
from pdtrt.bench.records import RequestRecord, read_csv, write_csv
from pdtrt.bench.runner import LoopKind, RunPlan, run_plan
from pdtrt.bench.stats import Dist, SLOTargets, Summary, summarize
from pdtrt.bench.workload import DatasetPrompt, PlannedRequest, Workload, load_dataset

__all__ = ["COMPARED", "ArrivalProcess", "BenchConfig", "BenchReport", "DatasetPrompt", "Dist",
           "LengthDist", "LengthKind", "LoopKind", "PlannedRequest", "RequestRecord",
           "RunPlan", "RunResult", "SLOTargets", "Summary", "Workload", "arrival_times_s",
           "load_dataset", "parse_length", "read_csv", "run_bench", "run_plan", "summarize",
           "write_csv"]
