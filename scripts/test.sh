#!/usr/bin/env bash
# Installs everything the tests need into ./.venv, then runs the whole suite.
# Arguments go to pytest: the fast tier (no Ray, Spark, server processes or crash
# tests; under 2 minutes on 2 cores) is  bash scripts/test.sh -m "not slow and not crash"
# (tests/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
