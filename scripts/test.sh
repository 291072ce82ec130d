#!/usr/bin/env bash
# Installs everything the tests need into ./.venv, then runs the whole suite.
# Arguments go to pytest: the fast tier (no Ray, Spark, server processes or crash
# tests; under 2 minutes on 2 cores) is  bash scripts/test.sh -m "not slow and not crash"
# (tests/README.md). setup.sh installs only when something changed;
# MQSTORE_SKIP_SETUP=1 skips it (./.venv must be complete).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${MQSTORE_SKIP_SETUP:-0}" != 1 ]]; then
  bash scripts/setup.sh
fi
exec .venv/bin/python -m pytest "$@"
