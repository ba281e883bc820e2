# Sourced by the aiperf benchmark (client_crosscheck.py): aiperf 0.13.0, NVIDIA's benchmark
# client (the one NVIDIA Dynamo uses), in a venv of its own ($AIPERF_VENV): it brings its own
# pins of pydantic, numpy, pandas, zmq and more that pdtrt's .venv must not see.
# AIPERF_INSTALL=0: stop with a message instead of installing it (no download; the smoke tests).
AIPERF_VENV="${AIPERF_VENV:-/tmp/pdtrt-aiperf-venv}"
if [ ! -x "$AIPERF_VENV/bin/aiperf" ]; then
  if [ "${AIPERF_INSTALL:-1}" = 0 ]; then
    echo "aiperf is not installed in $AIPERF_VENV (AIPERF_INSTALL=0: not installing it)" >&2
    exit 3
  fi
  python3 -m venv "$AIPERF_VENV"
  "$AIPERF_VENV/bin/pip" install -q aiperf==0.13.0
fi
