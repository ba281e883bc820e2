#!/usr/bin/env bash
# genai-perf's OpenAI chat endpoint type against pdtrt's OpenAI front (issue 28): the CPU
# reference deployment served by `pdtrt serve docs/examples/reference-cpu.yaml --detach` (its
# front on a free port), genai-perf 0.0.16 `profile --endpoint-type chat
# --streaming`, synthetic prompts of 64 tokens cut with the deployment's own tokenizer, 32
# output tokens (ignore_eos), closed loop with 4 users, 40 requests. Prints genai-perf's
# averages; results: docs/openai.md.
#   benchmarks/genai_perf_openai.sh              (run from the repository root; ~5 min the
#                                                first time: genai-perf installs into /tmp)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PDTRT="${PDTRT:-$ROOT/.venv/bin/pdtrt}"
WORK="$(mktemp -d /tmp/pdtrt-genai-perf-openai-XXXX)"
source "$ROOT/benchmarks/genai_perf_env.sh"
"$PDTRT" serve "$ROOT/docs/examples/reference-cpu.yaml" --detach \
  --workdir "$WORK/serve" --engines-dir "$ROOT/engines" --json > "$WORK/serve.json"
trap '"$PDTRT" stop "$WORK/serve" > /dev/null' EXIT
read -r OPENAI TOK < <("$PY" - "$WORK" <<'PYEOF'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
served = json.loads((work / "serve.json").read_text())
manifest = json.loads(Path(served["repository"], "pdtrt-repo.json").read_text())
print(served["endpoints"]["openai"], manifest["tokenizer_dir"])
PYEOF
)
MODEL="$(curl -sS "$OPENAI/models" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')"
cd "$WORK"
HF_HUB_OFFLINE=1 PATH="$GP_VENV/bin:$PATH" LD_LIBRARY_PATH="$WORK/libs" \
  "$GP_VENV/bin/genai-perf" profile -m "$MODEL" --endpoint-type chat \
  -u "${OPENAI%/v1}" --streaming --tokenizer "$TOK" --synthetic-input-tokens-mean 64 \
  --synthetic-input-tokens-stddev 0 --output-tokens-mean 32 --output-tokens-stddev 0 \
  --extra-inputs ignore_eos:true --concurrency 4 --request-count 40 --warmup-request-count 4 \
  --random-seed 0 > genai-perf.log 2>&1 || { tail -30 genai-perf.log; exit 1; }
"$PY" - <<'PYEOF'
import glob, json
[path] = glob.glob("artifacts/*/profile_export_genai_perf.json")
d = json.load(open(path))
keys = ("time_to_first_token", "inter_token_latency", "request_latency",
        "output_sequence_length", "output_token_throughput", "request_throughput")
print(json.dumps({k: {s: round(v, 2) for s, v in d[k].items() if s in ("avg", "p50", "p90")}
                  for k in keys if k in d}, indent=2))
PYEOF
