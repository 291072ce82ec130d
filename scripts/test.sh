#!/usr/bin/env bash
# Installs everything the tests need into ./.venv, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
