#!/usr/bin/env bash
# Issue 24's check: N consecutive `pdtrt bench --compare --rate 2 --requests 20` runs against
# one `pdtrt serve` of the CPU reference deployment, then `pdtrt stop`; prints each run's
# requests ok/failed, the supervisor's "stub died" lines and the kernel log's Triton faults
# before, after the runs and after the stop. Exit 1 on any failed request, stub death or fault.
#   benchmarks/bench_loop.sh [RUNS=50] [SPEC=docs/examples/reference-cpu.yaml] [REQUESTS=20]
# (PDTRT: the pdtrt command, .venv/bin/pdtrt by default)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
spec=${2:-docs/examples/reference-cpu.yaml}
requests=${3:-20}
pdtrt=${PDTRT:-.venv/bin/pdtrt}
work=$(mktemp -d /tmp/pdtrt-bench-loop-XXXX)
faults() { dmesg 2>/dev/null | grep -cE "triton_python_b|tritonserver.*(segfault|general protection)"; }
before=$(faults)
"$pdtrt" serve "$spec" --workdir "$work/serve" --detach --json > "$work/serve-out.json" || exit 2
stopped=0
# a run cut short (a timeout's SIGTERM, an error) must not leave the detached server behind
trap '[ "$stopped" = 1 ] || "$pdtrt" stop "$work/serve" > /dev/null 2>&1' EXIT
url=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['endpoints']['grpc'])" \
      "$work/serve-out.json")
bad=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  timeout 600 "$pdtrt" bench --url "$url" --compare --rate 2 --requests "$requests" --json --no-plots \
      --output-dir "$work/run$i" > "$work/run$i.json" 2> "$work/run$i.err"
  rc=$?
  line=$(python3 - "$work/run$i.json" <<'PY'
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["runs"]
except (OSError, ValueError, KeyError) as exc:
    print(f"no report ({exc})")
else:
    print(" ".join(f"{r['model']}: {r['summary']['num_ok']} ok / {r['failures']['num_failed']}"
                   " failed" for r in runs))
PY
)
  echo "run $i: exit $rc in $(( $(date +%s) - start )) s; $line"
  [ "$rc" -eq 0 ] || bad=$((bad + 1))
done
after_runs=$(faults)
deaths=$(grep -c "stub died" "$work/serve/supervisor.log" 2>/dev/null)
"$pdtrt" stop "$work/serve" > /dev/null
stopped=1
sleep 3
after_stop=$(faults)
echo "runs not clean: $bad of $runs; stub deaths: ${deaths:-0}"
echo "kernel-log Triton faults: $before before, $after_runs after the runs, $after_stop after pdtrt stop"
[ "$bad" -eq 0 ] && [ "${deaths:-0}" -eq 0 ] && [ "$after_stop" -eq "$before" ]
