#!/usr/bin/env bash
# Store engine 2 goals in one go: append with the dispatcher running (lag must stay
# bounded), then pull everything back, then random key lookups over ~10 M indexed keys.
# Usage: bash bench/goals-engine2.sh [DIR]   (default ./data/bench2; wiped first)
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
DIR=${1:-./data/bench2}
rm -rf "$DIR"
show() { printf '{"bench":"%s","result":%s}\n' "$1" "$(tail -n 1)"; }
"$MQ" bench append --store "$DIR" --messages 3400000 --body-size 128 --topics 4 --queues 4 | show append_dispatch_128
"$MQ" bench append --store "$DIR.nd" --messages 2000000 --body-size 128 --topics 4 --queues 4 --no-dispatch | show append_no_dispatch_128
"$MQ" bench consume --store "$DIR" | show consume_128
"$MQ" bench query --store "$DIR" --lookups 20000 | show query_10m_keys
rm -rf "$DIR" "$DIR.nd"
