# Sourced by quickstart.sh and test.sh: create .venv/ at the repository root and install pdtrt
# into it (editable, with the extras in PDTRT_EXTRAS). Re-installs only when pyproject.toml or
# the extras change, so repeated runs are quick. Default: everything the CPU reference
# deployment needs (torch CPU build, transformers, tokenizers, ucxx, the embedded Triton) and
# the Kubernetes schemas `pdtrt deploy` validates against, and OpenTelemetry for traces.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PYTHON="${PYTHON:-python3}"
PDTRT_EXTRAS="${PDTRT_EXTRAS:-dev,reference,server,tracing,deploy}"

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: pdtrt needs Python >= 3.11; '$PYTHON' is $("$PYTHON" --version 2>&1 || echo missing)" >&2
  echo "hint: set PYTHON=/path/to/python3.11 and run again" >&2
  exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.pdtrt-install-stamp"
want="$(cat "$ROOT/pyproject.toml" <(echo "$PDTRT_EXTRAS") | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "==> installing pdtrt[$PDTRT_EXTRAS] into $VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[$PDTRT_EXTRAS]" \
    2> >(grep -v "^WARNING: Location 'file:" >&2)
  echo "$want" > "$stamp"
fi
export PATH="$VENV/bin:$PATH"
