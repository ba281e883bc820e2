#!/usr/bin/env bash
# The newcomer's first command: install pdtrt into .venv/ and run the main job on the built-in
# examples -- validate both example specs (the seed scenario and the CPU reference deployment)
# and show the model facts and memory fit of Llama-3.1-8B on H100 SXM vs L40S.
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"

echo "==> pdtrt doctor"
pdtrt doctor
echo
echo "==> pdtrt spec validate docs/examples/*.yaml"
pdtrt spec validate docs/examples/llama3-8b-h100-l40s.yaml docs/examples/reference-cpu.yaml
echo
echo "==> Llama-3.1-8B, ISL 3000 / OSL 500: H100 SXM (prefill) vs L40S (decode)"
pdtrt model-info meta-llama/Meta-Llama-3.1-8B --gpu h100-sxm --gpu l40s --isl 3000 --osl 500 \
  --kv-dtype fp8
echo
echo "done. Next: pdtrt spec init -o pdtrt.yaml   (then edit it and run pdtrt spec validate pdtrt.yaml)"
