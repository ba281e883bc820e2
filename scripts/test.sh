#!/usr/bin/env bash
# Run the whole test suite (creates .venv/ first if needed). Extra arguments go to pytest,
# e.g. ./scripts/test.sh -k spec -x
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
