#!/usr/bin/env bash
# The newcomer's first command: install pdtrt into .venv/ and run the main job -- the CPU
# reference deployment on a real Triton server:
#   1. check the example specs, print the trtllm-1.2 build plan of the seed scenario and its
#      model facts (H100 vs L40S);
#   2. build the reference engines (tiny seeded Llama + tokenizer) and generate the repository;
#   3. start the embedded Triton 2.51 with prefill and decode in separate model instances;
#   4. stream a completion through the disaggregated path (router -> prefill -> UCX KV transfer
#      -> decode) with tritonclient, print TTFT and ITL, and the KV-transfer time from the
#      server's Prometheus metrics; the same prompt through the aggregated baseline;
#   5. stop the server.
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
OUT="${PDTRT_QUICKSTART_DIR:-$ROOT/out/quickstart}"
mkdir -p "$OUT"

echo "==> pdtrt doctor"
pdtrt doctor
echo
echo "==> pdtrt spec validate docs/examples/*.yaml"
pdtrt spec validate docs/examples/llama3-8b-h100-l40s.yaml docs/examples/reference-cpu.yaml
echo
echo "==> pdtrt build docs/examples/llama3-8b-h100-l40s.yaml --dry-run (trtllm-1.2: what each GPU host runs)"
pdtrt build docs/examples/llama3-8b-h100-l40s.yaml --dry-run > "$OUT/build-plan-trtllm-1.2.txt"
head -n 12 "$OUT/build-plan-trtllm-1.2.txt"; echo "   (the whole plan: $OUT/build-plan-trtllm-1.2.txt)"
echo
echo "==> the seed scenario: Llama-3.1-8B, ISL 3000 / OSL 500, FP8 KV, on H100 SXM vs L40S"
pdtrt model-info meta-llama/Meta-Llama-3.1-8B --gpu h100-sxm --gpu l40s --isl 3000 --osl 500 \
  --kv-dtype fp8 | grep -E "^(model|parameters|weight bytes|KV bytes)|max concurrent|^memory fit"
echo
echo "==> pdtrt build docs/examples/reference-cpu.yaml (engines under $OUT/engines)"
pdtrt build docs/examples/reference-cpu.yaml --engines-dir "$OUT/engines"
echo
echo "==> pdtrt serve docs/examples/reference-cpu.yaml --detach"
pdtrt serve docs/examples/reference-cpu.yaml --engines-dir "$OUT/engines" --workdir "$OUT/serve" \
  --detach --json > "$OUT/serve.out.json"
trap 'echo; echo "==> pdtrt stop"; pdtrt stop "$OUT/serve"' EXIT
GRPC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoints"]["grpc"])' "$OUT/serve.out.json")
METRICS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoints"]["metrics"])' "$OUT/serve.out.json")
echo "serving on grpc $GRPC (log: $OUT/serve/server.log)"
echo
PROMPT="The quick brown fox jumps over the lazy dog"
echo "==> disaggregated (model 'ensemble'): pdtrt infer \"$PROMPT\" --max-tokens 24"
pdtrt infer "$PROMPT" --url "$GRPC" --model ensemble --max-tokens 24
echo
echo "==> aggregated baseline (model 'ensemble_aggregated')"
pdtrt infer "$PROMPT" --url "$GRPC" --model ensemble_aggregated --max-tokens 24
echo
echo "==> KV transfer over UCX (decode side, from $METRICS)"
python3 - "$METRICS" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
vals = {}
for line in text.splitlines():
    for name in ("pdtrt_kv_transfer_seconds_total", "pdtrt_kv_transfers_total",
                 "pdtrt_kv_transfer_bytes_total"):
        if line.startswith(name + "{"):
            vals[name] = vals.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
n = vals.get("pdtrt_kv_transfers_total", 0)
if n:
    print(f"KV transfers: {n:.0f}, {vals['pdtrt_kv_transfer_bytes_total'] / n / 1024:.1f} KiB "
          f"each, {vals['pdtrt_kv_transfer_seconds_total'] / n * 1000:.2f} ms each (mean)")
else:
    print("no KV transfer recorded")
PY
