#!/usr/bin/env bash
# Cross-check `pdtrt bench` against genai-perf (a client nobody here wrote) on the same server
# and workload: the fake_llm test fixture (not an LLM) with a 10 ms sleep per token, closed
# loop with 4 users, 60 requests, 16 input / 16 output tokens. Results: docs/bench.md.
#   benchmarks/genai_perf_crosscheck.sh          (run from the repository root; ~5 min the
#                                                first time: genai-perf installs into /tmp)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
PDTRT="${PDTRT:-$ROOT/.venv/bin/pdtrt}"
WORK="$(mktemp -d /tmp/pdtrt-genai-perf-XXXX)"
# genai-perf and the libraries its perf_analyzer needs
source "$ROOT/benchmarks/genai_perf_env.sh"
# a word-level tokenizer: every whitespace word is one token (fake_llm's output words too)
"$PY" - "$WORK/tok" <<'PYEOF'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"unk": 0, **{f"t{i}": 1 + i for i in range(1000)}}
vocab.update({f"w{i}_0": 1001 + i for i in range(512)})
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="unk"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
PYEOF
"$PY" - "$WORK" <<'PYEOF' &
import sys, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from client_limit import serve
server = serve(Path(sys.argv[1]), 10)
(Path(sys.argv[1]) / "url").write_text(server.endpoints.grpc_url)
try:
    while not (Path(sys.argv[1]) / "stop").exists():
        time.sleep(0.5)
finally:
    server.stop()
PYEOF
SERVER=$!
trap 'touch "$WORK/stop"; wait' EXIT
while [ ! -f "$WORK/url" ]; do
  # the server process died: fail now with its exit status (its error is printed above)
  kill -0 "$SERVER" 2>/dev/null || { wait "$SERVER"; echo "fake_llm server exited ($?)" >&2; exit 1; }
  sleep 1
done
URL="$(cat "$WORK/url")"
cd "$WORK"
for i in 1 2; do
  HF_HUB_OFFLINE=1 PATH="$GP_VENV/bin:$PATH" LD_LIBRARY_PATH="$WORK/libs" \
    "$GP_VENV/bin/genai-perf" profile -m ensemble --endpoint-type kserve --backend tensorrtllm \
    -u "$URL" --streaming --tokenizer "$WORK/tok" --synthetic-input-tokens-mean 16 \
    --synthetic-input-tokens-stddev 0 --output-tokens-mean 16 --output-tokens-stddev 0 \
    --concurrency 4 --request-count 60 --warmup-request-count 4 --random-seed 0 > "gp$i.log" 2>&1
  "$PY" -c "
import json; d = json.load(open('artifacts/ensemble-triton-tensorrtllm-concurrency4/profile_export_genai_perf.json'))
print('genai-perf', {k: round(d[k]['avg'], 2) for k in ('time_to_first_token', 'inter_token_latency', 'request_latency', 'output_token_throughput')})"
  rm -rf artifacts
  "$PDTRT" bench --url "$URL" --concurrency 4 --requests 60 --warmup 4 --isl 16 \
    --osl 16 --no-plots --output-dir "$WORK/pdtrt$i" --json > "pdtrt$i.json"
  "$PY" -c "
import json; s = json.load(open('pdtrt$i.json'))['runs'][0]['summary']
print('pdtrt     ', {'ttft_mean': round(s['ttft_ms']['mean'], 2), 'tpot_mean': round(s['tpot_ms']['mean'], 2), 'e2e_mean': round(s['e2e_ms']['mean'], 2), 'output_tok_per_s': round(s['output_tok_per_s'], 1)})"
done
