#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs mqstore with its test extras into it.
# Sourced by run.sh and test.sh, so each of them works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test]"
