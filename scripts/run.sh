#!/usr/bin/env bash
# The main job: the store served over gRPC (`mqstore serve` on a local Ray instance,
# one shard under ./data, sync flush): the front on 127.0.0.1:8080, Prometheus
# metrics on http://127.0.0.1:9464/metrics. Prints one JSON line ({"front": ...})
# once the store is open, then serves until Ctrl-C or SIGTERM, which close the store
# cleanly. Arguments go to `mqstore serve` (`bash scripts/run.sh --shards 2 --store ./data2`).
#
#   MQSTORE_RUN=bench bash scripts/run.sh   the embedded store instead: append 1M messages
#                                           under ./data/store, print the figures and a record
#   MQSTORE_SKIP_SETUP=1                    do not check ./.venv at all (MQSTORE_PYTHON: the interpreter);
#                                           without it setup.sh installs only when something changed
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${MQSTORE_SKIP_SETUP:-0}" != 1 ]]; then
  bash scripts/setup.sh
fi
PY="${MQSTORE_PYTHON:-.venv/bin/python}"
if [[ "${MQSTORE_RUN:-serve}" == bench ]]; then
  "$PY" -m mqstore.cli.main bench append --store ./data/store --messages "${MESSAGES:-1000000}" --body-size 128 --topics 4 --queues 4
  exec "$PY" -m mqstore.cli.main print --store ./data/store --count 1
fi
echo "mqstore: starting; once it prints its ready line, in another terminal:" >&2
echo "  source .venv/bin/activate && mqstore send --server 127.0.0.1:8080 --topic TopicTest --queue 0 hello" >&2
exec "$PY" -m mqstore.cli.main serve --store ./data "$@"
