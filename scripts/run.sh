#!/usr/bin/env bash
# The main job. Until the services land, it is the embedded store: append a
# million messages to ./data/store, print the figures, then print the first record.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
.venv/bin/mqstore bench append --store ./data/store --messages "${MESSAGES:-1000000}" --body-size 128 --topics 4 --queues 4
.venv/bin/mqstore print --store ./data/store --count 1
