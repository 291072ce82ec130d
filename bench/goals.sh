#!/usr/bin/env bash
# Runs the store-engine-1 goal benchmarks in one go, so every figure is measured in
# the same run as the disk yardstick. Prints one JSON line per benchmark.
# Usage: bash bench/goals.sh [DIR]   (default ./data/bench; wiped before each run)
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
DIR=${1:-./data/bench}
fresh() { rm -rf "$DIR"; mkdir -p "$DIR"; }
run() { local name=$1; shift; fresh; printf '{"bench":"%s","result":%s}\n' "$name" "$("$MQ" "$@")"; }

run disk              bench disk   --store "$DIR" --bytes $((1 << 30))
run async_128         bench append --store "$DIR" --messages 2000000 --body-size 128  --flush async --producers 1 --batch 1000 --no-dispatch
run async_1k          bench append --store "$DIR" --messages 1000000 --body-size 1024 --flush async --producers 1 --batch 1000 --no-dispatch
run sync_1k_4p        bench append --store "$DIR" --messages 1000000 --body-size 1024 --flush sync  --producers 4 --batch 1000 --no-dispatch
run sync_128_4p       bench append --store "$DIR" --messages 2000000 --body-size 128  --flush sync  --producers 4 --batch 1000 --no-dispatch
run disk_again        bench disk   --store "$DIR" --bytes $((1 << 30))
run recover_1g_1k     bench recover --store "$DIR" --bytes $((1 << 30)) --body-size 1024
run recover_1g_128    bench recover --store "$DIR" --bytes $((1 << 30)) --body-size 128
rm -rf "$DIR"
