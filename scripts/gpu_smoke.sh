#!/usr/bin/env bash
# The first thing to run on a GPU host: does pdtrt's trtllm-1.2 deployment start here and answer?
# One host, one GPU (the first), in NVIDIA's 26.07 trtllm image:
#   1. pdtrt doctor: the driver, the GPUs and which catalog entry the first one is;
#   2. a spec for this GPU: docs/examples/gpu-smoke.yaml (Qwen/Qwen3-0.6B, not gated) with both
#      pools on this GPU type and `serving.share_gpus` -- prefill and decode on GPU 0;
#   3. pdtrt build (the Hub snapshot into this host's Hugging Face cache, the LLM-API options);
#   4. the aggregated baseline, then the disaggregated deployment, one after the other: pdtrt repo,
#      launch.sh (builds the image once, runs `pdtrt preflight` -- versions and the LLM-API surface
#      check -- then `pdtrt serve` in the container), readiness, one request through the
#      ensemble, a clean stop;
#   5. what ran: the versions and LLM-API surface the preflight printed, each answer.
# Needs: an NVIDIA driver, docker with the NVIDIA container toolkit, the network to nvcr.io, PyPI
# and the Hugging Face Hub (or HF_HUB_OFFLINE=1 with the model in the cache). Not a measurement:
# both engines share one GPU.
#
# Usage: scripts/gpu_smoke.sh
# Variables: PDTRT_SMOKE_DIR (default out/gpu-smoke), PDTRT_SMOKE_READY_S (seconds a server may
# take to become ready, default 1200: the first run builds the image and loads the engines),
# PDTRT_SMOKE_MODEL (another Hugging Face model pdtrt knows, default Qwen/Qwen3-0.6B),
# PDTRT_SMOKE_GPU (a catalog key, when the GPU is not in the catalog: `pdtrt gpus`),
# PDTRT_SMOKE_PORT (the server's HTTP port, gRPC the next, metrics the one after; default 8000).
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
OUT="${PDTRT_SMOKE_DIR:-$ROOT/out/gpu-smoke}"
READY_S="${PDTRT_SMOKE_READY_S:-1200}"
HTTP_PORT="${PDTRT_SMOKE_PORT:-8000}"
GRPC_PORT=$((HTTP_PORT + 1))
mkdir -p "$OUT"
fail() { echo "gpu_smoke: $*" >&2; exit 2; }

for tool in nvidia-smi docker curl; do
  command -v "$tool" >/dev/null 2>&1 || fail "needs $tool on PATH (an NVIDIA driver, docker with the NVIDIA container toolkit, curl)"
done

echo "==> pdtrt doctor"
pdtrt doctor || true  # it names what is missing; the GPU check below decides
GPU="${PDTRT_SMOKE_GPU:-$(pdtrt doctor --json | python3 -c '
import json, sys
gpus = json.load(sys.stdin)["gpus"]["gpus"]
print(gpus[0]["catalog_key"] or "" if gpus else "")')}"
[[ -n "$GPU" ]] || fail "the first GPU is not in pdtrt's catalog (pdtrt gpus); set PDTRT_SMOKE_GPU to the nearest entry"
echo "this host's GPU 0: $GPU"

echo
echo "==> the spec: docs/examples/gpu-smoke.yaml on $GPU -> $OUT/gpu-smoke.yaml"
python3 - docs/examples/gpu-smoke.yaml "$OUT/gpu-smoke.yaml" "$GPU" "${PDTRT_SMOKE_MODEL:-}" \
  "$HTTP_PORT" <<'PY'
import sys, yaml
src, dst, gpu, model, http = sys.argv[1:]
spec = yaml.safe_load(open(src))
spec["prefill"]["gpu"] = spec["decode"]["gpu"] = gpu
if model:
    spec["model"]["name"] = model
spec["serving"].update(http_port=int(http), grpc_port=int(http) + 1, metrics_port=int(http) + 2)
open(dst, "w").write("# written by scripts/gpu_smoke.sh from " + src + "\n"
                     + yaml.safe_dump(spec, sort_keys=False))
PY
pdtrt spec validate "$OUT/gpu-smoke.yaml"

echo
echo "==> pdtrt build (engines under $OUT/engines)"
pdtrt build "$OUT/gpu-smoke.yaml" --engines-dir "$OUT/engines"

# serve MODE ENSEMBLE: generate, launch, wait for ready, one request, stop
serve() {
  local mode="$1" model="$2" repo="$OUT/repo-$1" log="$OUT/launch-$1.log" pid waited=0
  echo
  echo "==> $mode: pdtrt repo, then $repo/launch.sh (log: $log)"
  rm -rf "$repo" "$repo.run"
  pdtrt repo generate "$OUT/gpu-smoke.yaml" -o "$repo" --mode "$mode" --engines-dir "$OUT/engines"
  PDTRT_SRC="$ROOT" "$repo/launch.sh" >"$log" 2>&1 &
  pid=$!
  until curl -sf -o /dev/null "http://127.0.0.1:$HTTP_PORT/v2/models/health/ready"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 30 "$log" >&2
      fail "$mode: launch.sh exited before the server was ready (above: the end of $log)"
    fi
    if (( waited >= READY_S )); then
      kill -TERM "$pid" 2>/dev/null || true
      tail -n 30 "$log" >&2
      fail "$mode: not ready after ${READY_S}s (PDTRT_SMOKE_READY_S); the end of $log is above"
    fi
    sleep 5; waited=$((waited + 5))
  done
  echo "ready after ~${waited}s; the preflight in the container said:"
  sed -n '/^preflight of /,/^preflight: /p' "$log" | sed 's/^/  /'
  echo "--> pdtrt infer through '$model'"
  local rc=0
  pdtrt infer "What is the capital of France?" --url "127.0.0.1:$GRPC_PORT" --model "$model" \
    --max-tokens 32 || rc=$?
  echo "--> stopping (SIGTERM to docker run, which passes it to pdtrt serve)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    fail "$mode: the server did not stop within 60 s (see docker ps; the end of $log)"
  fi
  (( rc == 0 )) || fail "$mode: the request through '$model' failed (exit $rc); server log: $repo.run"
}

serve aggregated ensemble_aggregated
serve disaggregated ensemble
echo
echo "gpu_smoke: ok -- both deployments started on $GPU, answered and stopped ($OUT)"
