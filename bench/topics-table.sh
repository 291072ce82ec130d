#!/usr/bin/env bash
# Issue 26's table: bench append of MESSAGES messages (128 B bodies, batches of 1,000,
# 4 queues per topic) at 1, 1,000, 10,000, 50,000 and 100,000 topics, in both shapes
# (round-robin: message i to topic i % T; per-topic: each batch to one topic), each run
# two passes on one store (pass 1 cold: queues made during the run; pass 2 warm: every
# queue there), then the commitlog alone (--no-dispatch), with memory (RSS before and
# after, anonymous RSS per queue), inside the default limit of 1,024 descriptors.
# Each append row runs once per store type (the RocketMQ file layout, "default", and
# every consume queue in one RocksDB, "defaultRocksDB"), side by side.
# One JSON line per run: {"bench": ..., "topics": T, "shape": S, "store_type": K, "result": {...}}.
# Usage: bash bench/topics-table.sh [DIR] [TOPIC COUNTS...]   (default ./data/topics; wiped)
#   MESSAGES=1000000 (default) SHAPES="round-robin per-topic" STORE_TYPES="default defaultRocksDB"
#   MQ=.venv/bin/mqstore
# The 50,000 and 100,000 rows make 200,000 and 400,000 queue files: run them once.
set -euo pipefail
cd "$(dirname "$0")/.."
MQ=${MQ:-.venv/bin/mqstore}
DIR=${1:-./data/topics}
shift || true
COUNTS=${*:-1 1000 10000 50000 100000}
MESSAGES=${MESSAGES:-1000000}
SHAPES=${SHAPES:-round-robin per-topic}
STORE_TYPES=${STORE_TYPES:-default defaultRocksDB}
ulimit -n 1024
settle() { rm -rf "$DIR"; sync; sleep 5; }  # the VM's disk needs a moment after big deletes
show() { printf '{"bench":"%s","topics":%s,"shape":"%s","store_type":"%s","result":%s}\n' "$1" "$2" "$3" "$4" "$(tail -n 1)"; }
run() {  # NAME TOPICS SHAPE STORE_TYPE [ARGS...]
  local name=$1 t=$2 shape=$3 kind=$4
  shift 4
  settle
  "$MQ" bench append --store "$DIR" --messages "$MESSAGES" --body-size 128 --batch 1000 --topics "$t" --queues 4 \
    --shape "$shape" --segment-bytes 268435456 --store-type "$kind" "$@" 2>/dev/null | show "$name" "$t" "$shape" "$kind"
}

echo "{\"ulimit_n\":$(ulimit -n),\"max_map_count\":$(cat /proc/sys/vm/max_map_count 2>/dev/null || echo -1),\"messages\":$MESSAGES}"
for t in $COUNTS; do
  for shape in $SHAPES; do
    for kind in $STORE_TYPES; do
      run append_cold_then_warm "$t" "$shape" "$kind" --passes 2
    done
    run commitlog_alone "$t" "$shape" default --passes 2 --no-dispatch
  done
done
rm -rf "$DIR"
