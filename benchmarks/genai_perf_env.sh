# Sourced by the genai-perf benchmarks: genai-perf 0.0.16 in a venv of its own ($GP_VENV;
# genai-perf brings pandas and other pins pdtrt's .venv must not see), and the libraries its
# perf_analyzer (tritonclient 2.51 wheel) needs, libb64 and libcudart, linked from the embedded
# Triton's copies into "$WORK/libs" (put it on LD_LIBRARY_PATH). Needs ROOT, PY and WORK.
# GP_INSTALL=0: stop with a message instead of installing it (no download; the smoke tests).
GP_VENV="${GP_VENV:-/tmp/pdtrt-genai-perf-venv}"
if [ ! -x "$GP_VENV/bin/genai-perf" ]; then
  if [ "${GP_INSTALL:-1}" = 0 ]; then
    echo "genai-perf is not installed in $GP_VENV (GP_INSTALL=0: not installing it)" >&2
    exit 3
  fi
  python3 -m venv "$GP_VENV"
  "$GP_VENV/bin/pip" install -q genai-perf==0.0.16 "tritonclient[grpc]==2.51.0"
fi
SITE="$("$PY" -c 'import site; print(site.getsitepackages()[0])')"
mkdir -p "$WORK/libs"
ln -sf "$SITE"/nvidia_pytriton.libs/libb64-*.so.0d "$WORK/libs/libb64.so.0d"
ln -sf "$SITE"/nvidia_pytriton.libs/libcudart-*.so.12* "$WORK/libs/libcudart.so.12"
